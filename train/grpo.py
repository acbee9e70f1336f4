"""GRPO on a vision-language model from a YAML recipe.

Single process:  python train/grpo.py --recipe train/recipes/caprl_3b.yaml output_dir=runs/caprl
Multi-GPU:       accelerate launch --config_file train/accelerate/deepspeed_zero2.yaml \\
                     train/grpo.py --recipe train/recipes/caprl_3b.yaml
Same as `vlrl train grpo`; the logic lives in vlrl.training.grpo (see docs/training.md).
"""

from __future__ import annotations

from vlrl.cli import run


def main(argv: list[str] | None = None) -> None:
    run("train", "grpo", argv=argv)


if __name__ == "__main__":
    main()
