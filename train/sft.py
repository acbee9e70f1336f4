"""Supervised fine-tuning of a VLM (e.g. on the Vision-R1 cold-start set from `vlrl data cold-start`).

python train/sft.py --recipe train/recipes/tiny/sft_tiny.yaml output_dir=runs/sft
Logic: vlrl.training.sft.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    from vlrl.training.recipe import RecipeError, load_recipe
    from vlrl.training.sft import run_sft

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", required=True, help="YAML recipe")
    ap.add_argument("overrides", nargs="*", help="key=value overrides (YAML values), e.g. output_dir=DIR")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        recipe = load_recipe(args.recipe, args.overrides)
        recipe.method = "sft"
        metrics = run_sft(recipe)
    except RecipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(metrics, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
