"""`vlrl caption`: batch-caption an image corpus (resumable, shardable)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("caption", help="Caption an image corpus with any backend (resumable, shardable).")
    def caption() -> None:
        raise typer.Exit("vlrl caption: not built yet")
