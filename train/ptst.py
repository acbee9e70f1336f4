"""PTST (Vision-R1): GRPO stages with a growing length cap and a shrinking group, from a YAML recipe.

Single process:  python train/ptst.py --recipe train/recipes/vision_r1_7b_ptst.yaml output_dir=runs/ptst
Multi-GPU:       accelerate launch --config_file train/accelerate/deepspeed_zero3.yaml \\
                     train/ptst.py --recipe train/recipes/vision_r1_7b_ptst.yaml
The same run as `vlrl train ptst` (vlrl.training.ptst.run_ptst); docs/training.md has the details.

The steps, in order: the recipe → checks that need no model, the stage plan (constant prompts per
step, whole groups per batch) and the run's identity → the dataset, shuffled once for the whole run
→ each stage in turn: a GRPOTrainer from the previous stage's weights with this stage's length cap
and group size, trained on the data stream where the last stage stopped, saved, then torn down so
the next stage's vLLM engine fits → metrics.json with every stage.
"""

from __future__ import annotations

from vlrl.training.entry import as_method, one_line_errors, parse_args, report, warnings_once
from vlrl.training.ptst import close_ptst, open_ptst, train_stage
from vlrl.training.recipe import load_recipe


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv, method="ptst")
    warnings_once()
    with one_line_errors():
        recipe = as_method(load_recipe(args.recipe, args.overrides), "ptst")

        # Validate and probe (no model yet), plan the stages, refuse another run's folder or plan.
        run = open_ptst(recipe, resume=args.resume, force=args.force)

        # One stage at a time; a finished stage is reported, an interrupted one resumes.
        for stage in run.plan:
            train_stage(run, stage)

        report(close_ptst(run))


if __name__ == "__main__":
    main()
