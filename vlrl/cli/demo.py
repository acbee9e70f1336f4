"""`vlrl demo`: the embedded default run (shapes world CapRL loop)."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("demo", help="Run the shapes-world CapRL demo end to end on CPU (what `make demo` runs).")
    def demo(
        out: Path = typer.Option(Path("runs/demo"), "--out", help="Output folder (metrics.json, report.html)."),
        quick: bool = typer.Option(False, "--quick", help="60 GRPO steps and 60 eval scenes (what CI runs; under a minute with cached warm starts)."),
        seed: int = typer.Option(0, "--seed", help="Seed of the world, the warm starts and GRPO."),
        force: bool = typer.Option(False, "--force", help="Overwrite a finished or different demo run in --out."),
        cache_dir: Path | None = typer.Option(None, "--cache-dir", help="Warm-start cache (default ~/.cache/vlrl/demo)."),
    ) -> None:
        import json

        from vlrl.demos.shapes.demo import DemoError, run_demo

        try:
            metrics = run_demo(out, seed=seed, quick=quick, force=force, cache_dir=cache_dir)
        except DemoError as e:
            typer.echo(f"vlrl demo: {e}", err=True)
            raise typer.Exit(2) from None
        if metrics.get("reused"):
            typer.echo(f"{out} already holds a finished demo run (use --force to redo it); its metrics:")
        keys = ("acc_before", "acc_after", "gain", "reward_first", "reward_last", "grpo_steps", "wall_seconds", "seed")
        typer.echo(json.dumps({k: metrics.get(k) for k in keys}, indent=2))
        typer.echo(f"report: {out / 'report.html'}")
