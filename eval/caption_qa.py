"""Information-density evaluation as a script: ``python eval/caption_qa.py --qa DATASET --answerer SPEC --captions FILE --out DIR``.

Captions are cut to word budgets (50, 100, 200, 400 by default) and scored with the ``caprl_qa``
reward; writes a table and a plot of accuracy against budget per captioner. The logic lives in
:mod:`vlrl.rubicap.caption_qa`; same command as ``vlrl eval caption-qa``.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    import typer.main

    from vlrl.cli.eval import caption_qa_cmd

    app = typer.Typer(add_completion=False)
    app.command()(caption_qa_cmd)
    cmd = typer.main.get_command(app)
    cmd.main(args=argv if argv is not None else sys.argv[1:], prog_name="caption_qa.py")


if __name__ == "__main__":
    main()
