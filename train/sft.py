"""Supervised fine-tuning of a vision-language model from a YAML recipe (e.g. on cold-start data).

Single process:  python train/sft.py --recipe train/recipes/vision_r1_7b_sft.yaml output_dir=runs/sft
Multi-GPU:       accelerate launch --config_file train/accelerate/deepspeed_zero3.yaml \\
                     train/sft.py --recipe train/recipes/vision_r1_7b_sft.yaml
The same run as `vlrl train sft` (vlrl.training.sft.run_sft); docs/training.md has the details.

The steps, in order: the recipe → checks that need no model and the run's identity → the trainer
(records with images as chat rows, policy, SFTConfig, SFTTrainer) → train (continuing a killed run
from its newest checkpoint) → save the model and metrics.json.
"""

from __future__ import annotations

from vlrl.training.entry import as_method, one_line_errors, parse_args, report, warnings_once
from vlrl.training.grpo import open_run
from vlrl.training.recipe import load_recipe
from vlrl.training.sft import build_sft_trainer, finish_sft


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv, method="sft", resume=False)
    warnings_once()
    with one_line_errors():
        recipe = as_method(load_recipe(args.recipe, args.overrides), "sft")

        # Validate and probe (no model yet), refuse another run's folder, find the checkpoint.
        run = open_run(recipe, resume=True, force=args.force)
        if run.finished is not None:
            return report(run.finished)

        # Chat rows with their images, policy (weights from the checkpoint when resuming), SFTTrainer.
        trainer, resume_from = build_sft_trainer(run.recipe, resume=run.checkpoint)
        trainer.train(resume_from_checkpoint=resume_from)

        report(finish_sft(trainer, run))


if __name__ == "__main__":
    main()
