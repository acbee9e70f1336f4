"""Supervised fine-tuning of a VLM (e.g. on the Vision-R1 cold-start set from `vlrl data cold-start`).

python train/sft.py --recipe train/recipes/tiny/sft_tiny.yaml output_dir=runs/sft
Logic: vlrl.training.sft.
"""

from __future__ import annotations

from vlrl.cli import run


def main(argv: list[str] | None = None) -> None:
    run("train", "sft", argv=argv)


if __name__ == "__main__":
    main()
