"""Prism-style decoupled evaluation as a script: ``python eval/prism.py --captioner SPEC --answerer SPEC --bench FILE --out DIR``.

The captioner describes each benchmark image; a text-only answerer answers the benchmark question
from that caption alone. Same flags as ``vlrl eval prism``; the logic is :mod:`vlrl.methods.caprl.prism`
and the bring-your-own benchmark format is in ``docs/prism.md``.
"""

from __future__ import annotations

from vlrl.cli import run


def main(argv: list[str] | None = None) -> None:
    run("eval", "prism", argv=argv)


if __name__ == "__main__":
    main()
