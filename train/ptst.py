"""PTST (Vision-R1): GRPO stages 4K/16 -> 8K/8 -> 16K/4, each from the previous stage's weights.

accelerate launch --config_file train/accelerate/deepspeed_zero3.yaml \\
    train/ptst.py --recipe train/recipes/vision_r1_7b_ptst.yaml
Rerun the same command after an interruption: finished stages are skipped and the current one
resumes from its newest checkpoint. Logic: vlrl.training.ptst.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    from vlrl.training.ptst import run_ptst
    from vlrl.training.recipe import RecipeError, load_recipe

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", required=True, help="YAML recipe")
    ap.add_argument("overrides", nargs="*", help="key=value overrides (YAML values), e.g. output_dir=DIR")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        recipe = load_recipe(args.recipe, args.overrides)
        recipe.method = "ptst"
        metrics = run_ptst(recipe)
    except RecipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(metrics, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
