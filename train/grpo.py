"""GRPO on a vision-language model from a YAML recipe.

Single process:  python train/grpo.py --recipe train/recipes/caprl_3b.yaml output_dir=runs/caprl
Multi-GPU:       accelerate launch --config_file train/accelerate/deepspeed_zero2.yaml \\
                     train/grpo.py --recipe train/recipes/caprl_3b.yaml
The same command as `vlrl train grpo`: the same options (vlrl.training.entry.OPTIONS) and the one
dispatch (vlrl.training.entry.run → vlrl.training.grpo.run_grpo); docs/training.md has the details.

The steps it runs, in order: the recipe and its overrides → checks that need no model (values, geometry,
dataset columns, reward backends answering, packages installed) and the run's identity → the
trainer (dataset, rewards by name, policy, GRPOConfig, GRPOTrainer) → train, or finish a run whose
last step is already checkpointed → save the policy and metrics.json.
"""

from __future__ import annotations

from vlrl.training.entry import main as train_main


def main(argv: list[str] | None = None) -> None:
    train_main("grpo", argv)


if __name__ == "__main__":
    main()
