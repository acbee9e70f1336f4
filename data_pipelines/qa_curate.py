"""CapRL QA curation as a script: ``python data_pipelines/qa_curate.py --images DIR --vlm SPEC ...``.

A strong VLM writes K multiple-choice questions per image; a question is kept only when a small VLM
answers it right with the image every round and a text-only model answers it wrong without the
image. The logic lives in :mod:`vlrl.methods.caprl.curate`; this file is the same command as
``vlrl data qa-curate`` (all flags identical), kept for pipelines that call scripts.
"""

from __future__ import annotations

from vlrl.cli import run


def main(argv: list[str] | None = None) -> None:
    run("data", "qa-curate", argv=argv)


if __name__ == "__main__":
    main()
