"""PTST (Vision-R1): GRPO stages with a growing length cap and a shrinking group, from a YAML recipe.

Single process:  python train/ptst.py --recipe train/recipes/vision_r1_7b_ptst.yaml output_dir=runs/ptst
Multi-GPU:       accelerate launch --config_file train/accelerate/deepspeed_zero3.yaml \\
                     train/ptst.py --recipe train/recipes/vision_r1_7b_ptst.yaml
The same command as `vlrl train ptst`: the same options (vlrl.training.entry.OPTIONS) and the one
dispatch (vlrl.training.entry.run → vlrl.training.ptst.run_ptst); docs/training.md has the details.

The steps it runs, in order: the recipe → checks that need no model, the stage plan (constant prompts per
step, whole groups per batch) and the run's identity → the dataset, shuffled once for the whole run
→ each stage in turn: a GRPOTrainer from the previous stage's weights with this stage's length cap
and group size, trained on the data stream where the last stage stopped, saved, then torn down so
the next stage's vLLM engine fits → metrics.json with every stage.
"""

from __future__ import annotations

from vlrl.training.entry import main as train_main


def main(argv: list[str] | None = None) -> None:
    train_main("ptst", argv)


if __name__ == "__main__":
    main()
