"""A ``vlrl data qa-curate`` dataset as the next commands read it: questions by image id, or a bench.

CapRL's chain is caption → curate questions → reward → evaluate. The curated dataset (``OUT/dataset``,
a ``save_to_disk`` folder of ``{id, image, questions}``) is keyed by the same ``image_id`` that
``vlrl caption`` writes (one id policy for every command), so the joins need no glue:

* :func:`questions_by_id` gives ``vlrl reward score --qa`` each caption's questions, by id, without
  decoding a single image (only the ``id`` and ``questions`` columns are read);
* :func:`bench_rows` turns each curated image into Prism bench rows (one multiple-choice question
  per row), so ``vlrl eval prism --bench`` reads the dataset as it is.

Either path may name the qa-curate output folder or its ``dataset/`` folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CURATED_BENCHMARK = "qa-curate"
"""The ``benchmark`` name Prism reports for questions read from a qa-curate dataset."""


def dataset_folder(path: str | Path) -> Path:
    """The ``save_to_disk`` folder of a qa-curate dataset: ``path`` itself, or ``path/dataset``."""
    p = Path(path)
    if (p / "dataset" / "state.json").is_file() and not (p / "state.json").is_file():
        return p / "dataset"
    return p


def is_curated(path: str | Path) -> bool:
    """Whether ``path`` is a qa-curate dataset (its folder, or the folder holding ``dataset/``)."""
    folder = dataset_folder(path)
    info = folder / "dataset_info.json"
    if not (folder / "state.json").is_file() or not info.is_file():
        return False
    import json

    try:
        features = json.loads(info.read_text(encoding="utf-8")).get("features") or {}
    except ValueError:
        return False
    return {"id", "questions"} <= set(features) and "question" not in features


def questions_by_id(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """``image id → curated questions`` of a qa-curate dataset (images are not decoded)."""
    from vlrl.core.sources.dataset import load_disk_dataset

    folder = dataset_folder(path)
    if not (folder / "state.json").is_file():
        raise FileNotFoundError(f"{path}: not a qa-curate dataset (no save_to_disk folder here or in {Path(path) / 'dataset'})")
    ds, _ = load_disk_dataset(folder)
    missing = {"id", "questions"} - set(ds.column_names)
    if missing:
        raise ValueError(f"{path}: not a qa-curate dataset (no {', '.join(sorted(missing))} column)")
    ds = ds.select_columns(["id", "questions"])
    return {str(r["id"]): list(r["questions"]) for r in ds}


def bench_rows(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """Prism rows from qa-curate rows: one multiple-choice row per curated question, ``id``
    ``IMAGE_ID#N``, and for each the index of the image row it came from (to load its image)."""
    out: list[dict[str, Any]] = []
    origin: list[int] = []
    for i, row in enumerate(rows):
        for j, q in enumerate(row.get("questions") or []):
            media = {"video": row["video"]} if row.get("video") is not None else {"image": row.get("image")}
            out.append({"id": f"{row['id']}#{j}", "image_id": str(row["id"]), **media,
                        "benchmark": CURATED_BENCHMARK, "type": "mc", "question": q["question"],
                        "options": list(q["options"]), "answer": q["answer"]})
            origin.append(i)
    return out, origin


__all__ = ["CURATED_BENCHMARK", "bench_rows", "dataset_folder", "is_curated", "questions_by_id"]
