"""GRPO on a vision-language model from a YAML recipe.

Single process:  python train/grpo.py --recipe train/recipes/caprl_3b.yaml output_dir=runs/caprl
Multi-GPU:       accelerate launch --config_file train/accelerate/deepspeed_zero2.yaml \\
                     train/grpo.py --recipe train/recipes/caprl_3b.yaml
Same as `vlrl train grpo`; the logic lives in vlrl.training.grpo (see docs/training.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    from vlrl.training.grpo import run_grpo
    from vlrl.training.recipe import RecipeError, load_recipe

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", required=True, help="YAML recipe")
    ap.add_argument("overrides", nargs="*", help="key=value overrides (YAML values), e.g. output_dir=DIR")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        recipe = load_recipe(args.recipe, args.overrides)
        recipe.method = "grpo"
        metrics = run_grpo(recipe)
    except RecipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(metrics, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
