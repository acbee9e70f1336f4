"""`vlrl models ...` commands."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True)


@app.command("make-tiny")
def make_tiny_cmd(
    arch: str = typer.Option(..., "--arch", help="qwen2_5_vl, qwen2_vl, qwen3_vl or qwen2"),
    out: Path = typer.Option(..., "--out", help="Folder to write model, tokenizer and processor to."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random initialisation."),
    tokenizer: Path | None = typer.Option(None, "--tokenizer", help="Use this tokenizer folder (e.g. a real Qwen one) instead of training one."),
    hidden_size: int | None = typer.Option(None, "--hidden-size", min=8, help="Text hidden size (a multiple of 4 attention heads; default 128, head_dim 32: the smallest vLLM's CPU attention serves)."),
    layers: int | None = typer.Option(None, "--layers", min=1, help="Text decoder layers."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a bar of the build steps."),
) -> None:
    """Build a randomly initialised tiny model that loads offline with from_pretrained."""
    from vlrl.core.tiny import ARCHS, make_tiny

    if arch not in ARCHS:
        raise typer.BadParameter(f"{arch!r} is not one of {', '.join(ARCHS)}", param_hint="--arch")
    overrides = {}
    if hidden_size:
        overrides["hidden_size"] = hidden_size
    if layers:
        overrides["num_hidden_layers"] = layers
    try:
        path = make_tiny(arch, out, seed=seed, tokenizer=tokenizer, progress=progress, **overrides)
    except (OSError, ValueError) as e:
        typer.echo(f"vlrl models make-tiny: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(str(path))
