"""Vision-R1 modality-bridging cold start: ``python data_pipelines/cold_start.py --input SRC --vlm SPEC --reasoner SPEC --out DIR``.

The VLM writes a pseudo chain of thought for (image, question, answer), then a detailed description
from it; a text-only reasoner solves the problem from the description alone; only samples whose
answer matches the ground truth in a valid ``<think>/<answer>`` format are kept for SFT.
Same command as ``vlrl data cold-start``; the logic lives in :mod:`vlrl.methods.vision_r1.cold_start`.
"""

from __future__ import annotations

from vlrl.cli import run


def main(argv: list[str] | None = None) -> None:
    run("data", "cold-start", argv=argv)


if __name__ == "__main__":
    main()
