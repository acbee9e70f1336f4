"""`vlrl demo`: the shapes-world loops on a laptop CPU (CapRL by default, RubiCap, Vision-R1, CapRL on
video clips, and the reward comparison). Each runner lives in :mod:`vlrl.demos.shapes`; this module only parses flags,
picks the runner and prints its headline metrics."""

from __future__ import annotations

import importlib
from pathlib import Path

import typer

# method -> (runner "module:function", headline keys printed after the run)
RUNNERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "caprl": ("vlrl.demos.shapes.caprl.runner:run_demo",
              ("acc_before", "acc_after", "gain", "reward_first", "reward_last", "grpo_steps", "wall_seconds", "seed")),
    "rubicap": ("vlrl.demos.shapes.rubicap.runner:run_rubicap_demo",
                ("acc_before", "acc_after", "gain", "reward_first", "reward_last", "false_fact_share",
                 "guards_flagged_share", "guards", "wall_seconds", "seed")),
    "vision-r1": ("vlrl.demos.shapes.vision_r1.runner:run_vision_r1_demo",
                  ("acc_before", "acc_after", "format_before", "format_after", "mean_tokens_before",
                   "mean_tokens_after", "single_stage_acc_after", "wall_seconds", "seed")),
    "caprl-video": ("vlrl.demos.shapes.caprl_video.runner:run_video_demo",
                    ("method", "acc_before", "acc_after", "gain", "reward_first", "reward_last", "grpo_steps",
                     "wall_seconds", "seed")),
    "compare": ("vlrl.demos.shapes.compare.runner:run_compare", ("acc_before", "rows", "wall_seconds", "seed")),
}
METHODS = ", ".join(k for k in RUNNERS if k != "compare")
"""The ``--method`` choices, as the help and the error name them."""


def demo(
    out: Path | None = typer.Option(None, "--out", help="Output folder (metrics.json, report.html); default runs/demo[-METHOD]."),
    method: str = typer.Option("caprl", "--method", help=f"Which loop: {METHODS} (caprl by default; caprl-video: CapRL on clips)."),
    compare: bool = typer.Option(False, "--compare", help="Train the same warm start with each reward design and compare them."),
    quick: bool = typer.Option(False, "--quick", help="Fewer GRPO steps and eval scenes (what CI runs)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the world, the warm starts and training."),
    force: bool = typer.Option(False, "--force", help="Overwrite a finished or different demo run in --out."),
    cache_dir: Path | None = typer.Option(None, "--cache-dir", help="Warm-start cache (default ~/.cache/vlrl/demo)."),
    rechecks: int = typer.Option(0, "--rechecks", min=0,
                                 help="vision-r1 only: the cold start's stand-in reasoner re-states its step up to N "
                                      "extra times (R1-style overthinking, the habit PTST targets)."),
    guards: str = typer.Option("all", "--guards",
                               help="rubicap only: the guards that veto a rollout before the rubric reward: all (every "
                                    "default guard, the judge-hack ones included) or basic (self_praise, "
                                    "grader_address, repetition, length)."),
    bench_inputs: Path | None = typer.Option(None, "--bench-inputs", help="Instead of a run: build (or reuse) the CapRL "
                                             "demo's trained reward answerer and write captions of its world with their "
                                             "questions to DIR, for `vlrl bench reward --qa` (prints the command)."),
) -> None:
    import json

    from vlrl.demos.shapes.kit.base import DemoError

    if bench_inputs is not None:
        from vlrl.demos.shapes.caprl.bench_inputs import bench_command, write_bench_inputs

        info = write_bench_inputs(bench_inputs, seed=seed, cache_dir=cache_dir)
        typer.echo(json.dumps(info, indent=2))
        typer.echo(bench_command(bench_inputs, info))
        return

    if compare and method != "caprl":
        typer.echo("vlrl demo: --compare runs every reward itself; do not combine it with --method", err=True)
        raise typer.Exit(2)
    name = "compare" if compare else method
    if name not in RUNNERS or name == "compare" and not compare:
        typer.echo(f"vlrl demo: unknown --method {method!r}; choose {METHODS}", err=True)
        raise typer.Exit(2)
    if rechecks and name != "vision-r1":
        typer.echo("vlrl demo: --rechecks applies to --method vision-r1 only", err=True)
        raise typer.Exit(2)
    if guards != "all" and name != "rubicap":
        typer.echo("vlrl demo: --guards applies to --method rubicap only", err=True)
        raise typer.Exit(2)
    if guards != "all":
        from vlrl.demos.shapes.rubicap.runner import GUARD_SETS

        if guards not in GUARD_SETS:
            typer.echo(f"vlrl demo: unknown --guards {guards!r}; choose {' or '.join(GUARD_SETS)}", err=True)
            raise typer.Exit(2)
    target, keys = RUNNERS[name]
    out = out or Path("runs/demo" if name == "caprl" else f"runs/demo-{name}")
    module, func = target.split(":")
    run = getattr(importlib.import_module(module), func)
    try:
        extra = {"rechecks": rechecks} if rechecks else {}
        if guards != "all":
            extra["guards"] = guards
        metrics = run(out, seed=seed, quick=quick, force=force, cache_dir=cache_dir, **extra)
    except DemoError as e:
        typer.echo(f"vlrl demo: {e}", err=True)
        raise typer.Exit(2) from None
    if metrics.get("reused"):
        typer.echo(f"{out} already holds a finished demo run (use --force to redo it); its metrics:")
    typer.echo(json.dumps({k: metrics.get(k) for k in keys}, indent=2))
    typer.echo(f"report: {out / 'report.html'}")


def register(app: typer.Typer) -> None:
    app.command("demo", help="Run a shapes-world demo end to end on CPU (`make demo` runs the CapRL one).")(demo)
