"""RubiCap teacher committee as a script: ``python data_pipelines/teacher_captions.py --images SRC --teacher SPEC ... --out DIR``.

Every teacher (any mix of ``openai:`` endpoints and ``hf:`` folders, optionally ``NAME=SPEC``) captions
every image from a prompt template; the job is resumable and cached, and a teacher that fails has its
missing captions recorded with the reason instead of stopping the others. The logic lives in
:mod:`vlrl.methods.rubicap.teachers`; this is the same command as ``vlrl data teacher-captions``.
"""

from __future__ import annotations

from vlrl.cli import run


def main(argv: list[str] | None = None) -> None:
    run("data", "teacher-captions", argv=argv)


if __name__ == "__main__":
    main()
