"""RubiCap teacher committee as a script: ``python data_pipelines/teacher_captions.py --images SRC --teacher SPEC ... --out DIR``.

Every teacher (any mix of ``openai:`` endpoints and ``hf:`` folders, optionally ``NAME=SPEC``) captions
every image from a prompt template; the job is resumable and cached, and a teacher that fails has its
missing captions recorded with the reason instead of stopping the others. The logic lives in
:mod:`vlrl.rubicap.teachers`; this is the same command as ``vlrl data teacher-captions``.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    import typer.main

    from vlrl.cli.data import teacher_captions_cmd

    app = typer.Typer(add_completion=False)
    app.command()(teacher_captions_cmd)
    cmd = typer.main.get_command(app)
    cmd.main(args=argv if argv is not None else sys.argv[1:], prog_name="teacher_captions.py")


if __name__ == "__main__":
    main()
