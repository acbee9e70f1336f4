"""Arena evaluation as a script: ``python eval/arena.py --candidate SPEC --baseline SPEC --judge SPEC --images SRC --out DIR``.

A VLM judge compares the candidate's caption with each baseline's, image in view, in both orders so a
position-biased judge cannot move the result; reports win rate, the CapArena-style score and average
caption lengths. The logic lives in :mod:`vlrl.methods.rubicap.arena`; same command as ``vlrl eval arena``.
"""

from __future__ import annotations

from vlrl.cli import run


def main(argv: list[str] | None = None) -> None:
    run("eval", "arena", argv=argv)


if __name__ == "__main__":
    main()
