"""MathVista-style reasoning evaluation: ``python eval/reasoning.py --model SPEC --bench FILE --out DIR``.

One attempt per item (no retrying until well-formed), answers extracted exactly as the ``hfrrf``
reward does, with format-failure rate and length statistics beside accuracy.
Same command as ``vlrl eval reasoning``; the logic lives in :mod:`vlrl.methods.vision_r1.evaluate`.
"""

from __future__ import annotations

from vlrl.cli import run


def main(argv: list[str] | None = None) -> None:
    run("eval", "reasoning", argv=argv)


if __name__ == "__main__":
    main()
