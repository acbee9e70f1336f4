"""`vlrl train ...` commands."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True)


def _run_recipe(method: str, recipe: str, overrides: list[str] | None, resume: bool, force: bool = False) -> None:
    from vlrl.training.entry import as_method, one_line_errors, report, run, warnings_once
    from vlrl.training.recipe import load_recipe

    warnings_once()
    with one_line_errors():
        metrics = run(as_method(load_recipe(recipe, overrides or []), method), resume=resume, force=force)
    report(metrics)


_RECIPE = typer.Option(..., "--recipe", "-r", help="YAML recipe (train/recipes/...).")
_OVERRIDES = typer.Argument(None, help="key=value overrides, YAML-parsed: output_dir=DIR trainer.learning_rate=1e-5 model.lora=null")
_RESUME = typer.Option(True, "--resume/--no-resume", help="Continue from the newest checkpoint in output_dir.")
_FORCE = typer.Option(False, "--force", help="Continue in an output_dir whose recipe.resolved.json differs from this recipe.")


@app.command("grpo", help="GRPO on a VLM from a recipe (also `accelerate launch train/grpo.py --recipe ...`).")
def grpo_cmd(recipe: str = _RECIPE, overrides: list[str] | None = _OVERRIDES, resume: bool = _RESUME,
             force: bool = _FORCE) -> None:
    _run_recipe("grpo", recipe, overrides, resume, force)


@app.command("ptst", help="PTST: GRPO stages with growing length caps and shrinking groups (Vision-R1).")
def ptst_cmd(recipe: str = _RECIPE, overrides: list[str] | None = _OVERRIDES, resume: bool = _RESUME,
             force: bool = _FORCE) -> None:
    _run_recipe("ptst", recipe, overrides, resume, force)


@app.command("sft", help="Supervised fine-tuning of a VLM (e.g. on `vlrl data cold-start` output).")
def sft_cmd(recipe: str = _RECIPE, overrides: list[str] | None = _OVERRIDES, force: bool = _FORCE) -> None:
    _run_recipe("sft", recipe, overrides, True, force)


@app.command("check", help="Validate a recipe (geometry, values, rewards, dataset columns, stages) and probe what it "
                            "needs (reward backends answer, packages installed) without loading the policy.")
def check_cmd(
    recipe: str = _RECIPE,
    overrides: list[str] | None = _OVERRIDES,
    probe: bool = typer.Option(True, "--probe/--no-probe", help="Probe reward backends and required packages "
                               "(--no-probe: only what the recipe says, e.g. on a machine without the servers)."),
) -> None:
    from vlrl.training.recipe import RecipeError, load_recipe, validate

    try:
        r = load_recipe(recipe, overrides or [])
        validate(r)
        if probe:
            from vlrl.training.preflight import check

            check(r)
    except RecipeError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"{recipe}: OK ({r.method}, {len(r.rewards)} reward(s){'' if probe else ', not probed'})")
