"""RubiCap rubric synthesis as a script: ``python data_pipelines/rubrics.py --teachers DIR --student SPEC --writer SPEC --out DIR``.

The student captions each image; the rubric writer keeps the facts at least two teachers agree on,
diagnoses the student's deficiencies (critical / important / minor) and writes one weighted binary
rubric per deficiency, validated against a schema (repaired, retried, else rejected with the reason).
The logic lives in :mod:`vlrl.methods.rubicap.synthesis`; this is the same command as ``vlrl data rubrics``.
"""

from __future__ import annotations

from vlrl.cli import run


def main(argv: list[str] | None = None) -> None:
    run("data", "rubrics", argv=argv)


if __name__ == "__main__":
    main()
