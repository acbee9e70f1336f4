"""Supervised fine-tuning of a vision-language model from a YAML recipe (e.g. on cold-start data).

Single process:  python train/sft.py --recipe train/recipes/vision_r1_7b_sft.yaml output_dir=runs/sft
Multi-GPU:       accelerate launch --config_file train/accelerate/deepspeed_zero3.yaml \\
                     train/sft.py --recipe train/recipes/vision_r1_7b_sft.yaml
The same command as `vlrl train sft`: the same options (vlrl.training.entry.OPTIONS) and the one
dispatch (vlrl.training.entry.run → vlrl.training.sft.run_sft); docs/training.md has the details.

The steps it runs, in order: the recipe → checks that need no model and the run's identity → the trainer
(records with images as chat rows, policy, SFTConfig, SFTTrainer) → train (continuing a killed run
from its newest checkpoint) → save the model and metrics.json.
"""

from __future__ import annotations

from vlrl.training.entry import main as train_main


def main(argv: list[str] | None = None) -> None:
    train_main("sft", argv)


if __name__ == "__main__":
    main()
