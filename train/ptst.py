"""PTST (Vision-R1): GRPO stages 4K/16 -> 8K/8 -> 16K/4, each from the previous stage's weights.

accelerate launch --config_file train/accelerate/deepspeed_zero3.yaml \\
    train/ptst.py --recipe train/recipes/vision_r1_7b_ptst.yaml
Rerun the same command after an interruption: finished stages are skipped and the current one
resumes from its newest checkpoint. Logic: vlrl.training.ptst.
"""

from __future__ import annotations

from vlrl.cli import run


def main(argv: list[str] | None = None) -> None:
    run("train", "ptst", argv=argv)


if __name__ == "__main__":
    main()
