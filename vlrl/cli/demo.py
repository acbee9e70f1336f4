"""`vlrl demo`: the embedded default run (shapes world CapRL loop)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("demo", help="Run the shapes-world CapRL demo end to end on CPU.")
    def demo() -> None:
        raise typer.Exit("vlrl demo: not built yet")
