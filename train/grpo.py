"""GRPO on a vision-language model from a YAML recipe.

Single process:  python train/grpo.py --recipe train/recipes/caprl_3b.yaml output_dir=runs/caprl
Multi-GPU:       accelerate launch --config_file train/accelerate/deepspeed_zero2.yaml \\
                     train/grpo.py --recipe train/recipes/caprl_3b.yaml
The same run as `vlrl train grpo` (vlrl.training.grpo.run_grpo); docs/training.md has the details.

The steps, in order: the recipe and its overrides → checks that need no model (values, geometry,
dataset columns, reward backends answering, packages installed) and the run's identity → the
trainer (dataset, rewards by name, policy, GRPOConfig, GRPOTrainer) → train, or finish a run whose
last step is already checkpointed → save the policy and metrics.json.
"""

from __future__ import annotations

from vlrl.training.entry import as_method, one_line_errors, parse_args, report, warnings_once
from vlrl.training.grpo import build_trainer, close_rewards, finish_run, open_run, train_or_finish
from vlrl.training.recipe import load_recipe


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv, method="grpo")
    warnings_once()
    with one_line_errors():
        recipe = as_method(load_recipe(args.recipe, args.overrides), "grpo")

        # Validate and probe (no model yet), refuse another run's folder, find the checkpoint.
        run = open_run(recipe, resume=args.resume, force=args.force)
        if run.finished is not None:
            return report(run.finished)

        # Dataset, rewards, policy (weights from the checkpoint when resuming), GRPOTrainer.
        trainer, resume_from = build_trainer(run.recipe, resume=run.checkpoint)
        try:
            train_or_finish(trainer, resume_from)
        finally:
            close_rewards(trainer)  # frees answerer/judge backends and logs their accounting

        report(finish_run(trainer, run))


if __name__ == "__main__":
    main()
