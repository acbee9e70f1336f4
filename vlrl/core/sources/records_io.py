"""Reading and writing vlrl's records as HF ``datasets`` (JSONL, parquet, ``save_to_disk``, imagefolder).

The record types themselves (:mod:`vlrl.core.records`) are pure: they validate, they do no IO. Every
file a record reaches or comes from goes through here, next to the other readers of
:mod:`vlrl.core.sources`.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from vlrl.core.images import IMAGE_EXTENSIONS, ImageLoadError, resolve_under_root
from vlrl.core.pipeline import write_jsonl
from vlrl.core.records import (
    MCQ,
    Caption,
    ImageMode,
    ImageRef,
    Record,
    RecordError,
    RubricItem,
)
from vlrl.core.sources.dataset import DatasetSource, find_image_column, load_any_dataset
from vlrl.core.sources.dataset import undecoded as _undecoded

if TYPE_CHECKING:
    import datasets

# ---------------------------------------------------------------- datasets round trips


def _features(cls: type, image_mode: ImageMode) -> datasets.Features:
    import datasets

    s = datasets.Value("string")
    if cls is ImageRef:
        if image_mode == "feature":
            return datasets.Features({"id": s, "image": datasets.Image(), "path": s, "meta": s})
        return datasets.Features({"id": s, "image": s, "meta": s})
    cols = {
        MCQ: {"id": s, "image_id": s, "question": s, "options": datasets.List(s), "answer": s, "provenance": s},
        RubricItem: {"id": s, "criterion": s, "pass_rule": s, "severity": s, "weight": datasets.Value("float64")},
        Caption: {"id": s, "image_id": s, "text": s, "model": s, "prompt": s, "sampling": s},
    }[cls]
    return datasets.Features(cols)


def _image_row(ref: ImageRef, image_mode: ImageMode, root: str | os.PathLike[str] | None) -> dict[str, Any]:
    meta = json.dumps(ref.meta, ensure_ascii=False, sort_keys=True, default=str)
    if image_mode == "path":
        if not ref.path:
            raise RecordError(ref.label(), "has only bytes; write it with image_mode='feature' or as an imagefolder")
        return {"id": ref.id, "image": ref.path, "meta": meta}
    data = ref.data
    if data is None:
        assert ref.path is not None
        file = resolve_under_root(ref.path, root if root is not None else ".", ref.id)
        try:
            data = file.read_bytes()
        except OSError as e:
            raise ImageLoadError(ref.id, f"cannot read {ref.path!r} ({e.strerror or e})") from None
    return {"id": ref.id, "image": {"bytes": data, "path": ref.path}, "path": ref.path, "meta": meta}


def records_to_dataset(
    records: Iterable[Record],
    *,
    image_mode: ImageMode = "path",
    root: str | os.PathLike[str] | None = None,
) -> datasets.Dataset:
    """Records of one kind → a ``datasets.Dataset`` with a fixed schema for that kind.

    For :class:`ImageRef`, ``image_mode="path"`` stores the relative path in a string ``image``
    column; ``"feature"`` embeds the bytes in an HF ``Image`` column (reading path-only refs from
    ``root``) and keeps the relative path in a ``path`` column.
    """
    import datasets

    records = list(records)
    kinds = {type(r) for r in records}
    if len(kinds) > 1:
        raise ValueError(f"records_to_dataset needs records of one kind, got {sorted(k.__name__ for k in kinds)}")
    if not records:
        raise ValueError("records_to_dataset needs at least one record (the kind decides the schema)")
    cls = kinds.pop()
    if image_mode not in ("path", "feature"):
        raise ValueError(f"image_mode must be 'path' or 'feature', got {image_mode!r}")
    rows = [_image_row(r, image_mode, root) if cls is ImageRef else r.to_row() for r in records]
    return datasets.Dataset.from_list(rows, features=_features(cls, image_mode))


def infer_record_type(columns: Iterable[str]) -> type:
    cols = set(columns)
    if {"question", "options", "answer"} <= cols:
        return MCQ
    if {"criterion", "pass_rule"} <= cols:
        return RubricItem
    if {"text", "model"} <= cols:
        return Caption
    if find_image_column(cols):
        return ImageRef
    raise ValueError(f"cannot tell which record kind has columns {sorted(cols)}")


def dataset_to_records(
    ds: datasets.Dataset, cls: type | None = None, *, root: str | os.PathLike[str] = "."
) -> list[Any]:
    """The inverse of :func:`records_to_dataset` (and a reader for compatible foreign datasets).

    ``root`` only matters for image datasets holding absolute paths, which are made relative to it.
    """
    cls = cls or infer_record_type(ds.column_names)
    if cls is ImageRef:
        return DatasetSource(ds, root=Path(root), kind="dataset").image_refs()
    out = []
    for row in _undecoded(ds):
        try:
            out.append(cls.from_dict(row))
        except TypeError as e:  # missing required field
            raise RecordError(f"{cls.kind} row", str(e)) from None
    return out


def _format_for(dest: Path, format: str | None) -> str:
    if format:
        return format
    if dest.suffix in (".jsonl", ".json"):
        return "jsonl"
    if dest.suffix == ".parquet":
        return "parquet"
    return "disk"


def save_records(
    records: Iterable[Record],
    dest: str | os.PathLike[str],
    *,
    format: Literal["jsonl", "parquet", "disk", "imagefolder"] | None = None,
    image_mode: ImageMode = "path",
    root: str | os.PathLike[str] | None = None,
) -> Path:
    """Write records as JSONL, parquet, a ``save_to_disk`` folder or an imagefolder.

    The format follows ``dest``'s suffix unless given (``.jsonl``, ``.parquet``, else a folder for
    ``save_to_disk``). JSONL cannot hold bytes, so it always stores image paths.
    """
    dest = Path(dest)
    fmt = _format_for(dest, format)
    records = list(records)
    if fmt == "imagefolder":
        other = sorted({type(r).__name__ for r in records if not isinstance(r, ImageRef)})
        if other:
            raise ValueError(f"an imagefolder holds images: cannot write {', '.join(other)} records as one")
        return save_imagefolder(records, dest, root=root)  # type: ignore[arg-type]
    if fmt == "jsonl":
        if image_mode == "feature":
            raise ValueError("JSONL cannot embed image bytes; use image_mode='path', parquet or save_to_disk")
        write_jsonl(dest, records_to_dataset(records, image_mode="path", root=root))
        return dest
    ds = records_to_dataset(records, image_mode=image_mode, root=root)
    if fmt == "parquet":
        dest.parent.mkdir(parents=True, exist_ok=True)
        ds.to_parquet(str(dest))
    elif fmt == "disk":
        ds.save_to_disk(str(dest))
    else:
        raise ValueError(f"unknown format {fmt!r} (jsonl, parquet, disk, imagefolder)")
    return dest


def save_imagefolder(
    refs: Iterable[ImageRef],
    dest: str | os.PathLike[str],
    *,
    root: str | os.PathLike[str] | None = None,
    columns: dict[str, Sequence[Any]] | None = None,
) -> Path:
    """Copy images into ``dest`` and write HF's ``metadata.jsonl`` (``file_name``, ``id``, ``meta``).

    ``columns`` adds per-image columns (e.g. a caption per image) in the order of ``refs``. Images
    keep their relative path; bytes-only refs are named after their id plus the detected format.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    refs = list(refs)
    columns = columns or {}
    for name, values in columns.items():
        if len(values) != len(refs):
            raise ValueError(f"column {name!r} has {len(values)} values for {len(refs)} images")
    rows = []
    for i, ref in enumerate(refs):
        data = ref.data
        if data is None:
            assert ref.path is not None
            src = resolve_under_root(ref.path, root if root is not None else ".", ref.id)
            data = src.read_bytes()
        rel = ref.path or _name_for_bytes(ref.id, data)
        target = resolve_under_root(rel, dest, ref.id)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        row = {"file_name": rel, "id": ref.id, "meta": json.dumps(ref.meta, ensure_ascii=False, sort_keys=True, default=str)}
        row.update({name: values[i] for name, values in columns.items()})
        rows.append(row)
    write_jsonl(dest / "metadata.jsonl", rows)
    return dest


def _name_for_bytes(image_id: str, data: bytes) -> str:
    if Path(image_id).suffix.lower() in IMAGE_EXTENSIONS:
        return image_id
    from PIL import Image, UnidentifiedImageError

    try:
        fmt = (Image.open(io.BytesIO(data)).format or "").lower()
    except (UnidentifiedImageError, OSError):
        raise ImageLoadError(image_id, "bytes are not an image; cannot name the file") from None
    return f"{image_id}.{'jpg' if fmt == 'jpeg' else fmt}"


def load_records(
    src: str | os.PathLike[str], cls: type | None = None, *, root: str | os.PathLike[str] | None = None
) -> list[Any]:
    """Read records back from any layout :func:`load_any_dataset` understands."""
    source = load_any_dataset(src, root=root)
    bad = source.skipped[0] if source.skipped else None
    if bad and cls is not ImageRef and (cls is not None or not len(source.dataset)):
        raise ValueError(f"{bad['path']}: {bad['reason']}")  # records (MCQs, rubrics) are all or nothing
    cls = cls or infer_record_type(source.dataset.column_names)
    if bad and cls is not ImageRef:
        raise ValueError(f"{bad['path']}: {bad['reason']}")
    if cls is ImageRef:
        return source.image_refs()
    return dataset_to_records(source.dataset, cls)


__all__ = [
    "dataset_to_records",
    "infer_record_type",
    "load_records",
    "records_to_dataset",
    "save_imagefolder",
    "save_records",
]
