"""Information-density evaluation as a script: ``python eval/caption_qa.py --qa DATASET --answerer SPEC --captions FILE --out DIR``.

Captions are cut to word budgets (50, 100, 200, 400 by default) and scored with the ``caprl_qa``
reward; writes a table and a plot of accuracy against budget per captioner. The logic lives in
:mod:`vlrl.methods.rubicap.caption_qa`; same command as ``vlrl eval caption-qa``.
"""

from __future__ import annotations

from vlrl.cli import run


def main(argv: list[str] | None = None) -> None:
    run("eval", "caption-qa", argv=argv)


if __name__ == "__main__":
    main()
