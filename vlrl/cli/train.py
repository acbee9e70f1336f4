"""`vlrl train ...` commands, built from the option table the ``train/*.py`` scripts use too
(:data:`vlrl.training.entry.OPTIONS`), so both take the same flags."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import typer

from vlrl.training.entry import COMMANDS, TRAIN_METHODS, Option, options_for

app = typer.Typer(no_args_is_help=True)

_ANNOTATIONS: dict[str, Any] = {"value": str, "rest": list[str] | None, "switch": bool, "flag": bool}


def _typer_param(o: Option) -> Any:
    if o.kind == "rest":
        return typer.Argument(None, help=o.help)
    if o.kind == "switch":
        return typer.Option(o.default, f"{o.flags[0]}/--no-{o.flags[0].removeprefix('--')}", help=o.help)
    if o.kind == "flag":
        return typer.Option(o.default, *o.flags, help=o.help)
    return typer.Option(..., *o.flags, help=o.help)


def _command(name: str, body: Callable[..., None]) -> None:
    """Register ``vlrl train <name>`` with the table's options as its parameters."""
    opts = options_for(name)
    body.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=_typer_param(o),
                           annotation=_ANNOTATIONS[o.kind]) for o in opts])
    body.__annotations__ = {o.name: _ANNOTATIONS[o.kind] for o in opts}
    body.__name__ = f"{name}_cmd"
    app.command(name, help=COMMANDS[name])(body)


def _train(method: str) -> Callable[..., None]:
    def body(**kwargs: Any) -> None:
        from vlrl.training.entry import train_command

        train_command(method, **kwargs)

    return body


def _check(recipe: str, overrides: list[str] | None, probe: bool) -> None:
    from vlrl.training.recipe import RecipeError, load_recipe
    from vlrl.training.validation import validate

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


for _method in TRAIN_METHODS:
    _command(_method, _train(_method))
_command("check", _check)
