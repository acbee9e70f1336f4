"""Prism-style decoupled evaluation as a script: ``python eval/prism.py --captioner SPEC --answerer SPEC --bench FILE --out DIR``.

The captioner describes each benchmark image; a text-only answerer answers the benchmark question
from that caption alone. Same flags as ``vlrl eval prism``; the logic is :mod:`vlrl.caprl.prism`
and the bring-your-own benchmark format is in ``docs/prism.md``.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    import typer

    from vlrl.cli.eval import prism_cmd

    app = typer.Typer(add_completion=False)
    app.command()(prism_cmd)
    app(args=argv if argv is not None else sys.argv[1:], prog_name="prism.py")


if __name__ == "__main__":
    main()
