"""Typed records for what vlrl stores, and their round trips through HF ``datasets``.

Every dataset vlrl builds is a list of a few kinds of record: an image reference, a
multiple-choice question (CapRL's QA pairs), a rubric item (RubiCap's criteria) and a caption.
They are plain dataclasses that validate themselves on construction, so a malformed MCQ (answer
letter not among the options, duplicate options) is refused with a one-line :class:`RecordError`
naming the record the moment it is read — not three stages later as a wrong reward.

On disk they are ordinary HF datasets, so anything that reads ``datasets`` reads them:

* JSONL, parquet and ``save_to_disk`` folders (:func:`save_records` / :func:`load_records`);
* ``imagefolder`` folders: image files plus a ``metadata.jsonl`` with ``file_name``
  (:func:`save_imagefolder`), loadable with ``datasets.load_dataset("imagefolder", data_dir=...)``.

Images travel either as the HF ``Image`` feature (bytes embedded: self-contained parquet and
``save_to_disk`` folders) or as paths relative to the dataset root (small metadata files next to an
image tree). Relative paths resolve against the *dataset root*: the folder itself for image folders
and imagefolders, the containing folder for a JSONL/parquet file or a ``save_to_disk`` folder,
unless ``root=`` says otherwise (for image folders ``root=`` only moves the boundary; see
:func:`load_any_dataset`). The loader refuses paths that leave the root.

Free-form dict fields (provenance, sampling parameters, image metadata) are stored as JSON strings:
Arrow would otherwise unify their keys across rows into one struct type, filling absent keys with
nulls and failing on mixed value types, and the round trip would not give back what went in.

:func:`load_any_dataset` is how the caption job, QA curation and ``vlrl data check`` read an image
source, whatever its layout; it returns a :class:`DatasetSource` whose images are never decoded by
``datasets`` itself, only by :func:`vlrl.images.load_image`.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
import os
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .images import (
    IMAGE_EXTENSIONS,
    ImageLoadError,
    load_image,
    resolve_under_root,
)

if TYPE_CHECKING:
    import datasets
    from PIL import Image

logger = logging.getLogger(__name__)

SEVERITY_WEIGHTS: dict[str, float] = {"critical": 3.0, "important": 2.0, "minor": 1.0}
Severity = Literal["critical", "important", "minor"]
ImageMode = Literal["path", "feature"]


class RecordError(ValueError):
    """A record that fails validation: ``"<kind> <name>: <reason>"`` on one line."""

    def __init__(self, record: object, reason: str) -> None:
        self.record = str(record)
        self.reason = " ".join(str(reason).split())
        super().__init__(f"{self.record}: {self.reason}")


def _clean_text(value: Any, what: str, label: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise RecordError(label, f"{what} must be a string, got {type(value).__name__}")
    value = value.strip()
    if not value and not allow_empty:
        raise RecordError(label, f"{what} is empty")
    return value


def _as_dict(value: Any, what: str, label: str) -> dict[str, Any]:
    if value is None or value == "":
        return {}
    if isinstance(value, str):  # the JSON-string column form
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise RecordError(label, f"{what} is not valid JSON ({e.msg})") from None
    if not isinstance(value, dict):
        raise RecordError(label, f"{what} must be a dict, got {type(value).__name__}")
    return value


class _Record:
    """Shared dict/row conversions. Subclasses are dataclasses."""

    kind: ClassVar[str]
    json_fields: ClassVar[tuple[str, ...]] = ()

    def label(self) -> str:
        rid = getattr(self, "id", None) or getattr(self, "image_id", None)
        return f"{self.kind} {rid}" if rid else self.kind

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        """Build from a dict or dataset row; unknown keys are ignored, JSON-string dict fields decoded."""
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_row(self) -> dict[str, Any]:
        row = self.to_dict()
        for name in self.json_fields:
            row[name] = json.dumps(row[name], ensure_ascii=False, sort_keys=True, default=str)
        return row


@dataclass
class ImageRef(_Record):
    """An image of a dataset: a path relative to the dataset root, or encoded bytes (or both).

    ``data`` holds the encoded file (what HF's ``Image`` feature calls ``bytes``); ``meta`` holds
    anything else known about the image (source, license, width...).
    """

    id: str
    path: str | None = None
    data: bytes | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    kind: ClassVar[str] = "image"
    json_fields: ClassVar[tuple[str, ...]] = ("meta",)

    def __post_init__(self) -> None:
        self.id = _clean_text(self.id, "id", "image <no id>")
        label = self.label()
        if self.path is not None:
            p = PurePosixPath(str(self.path).replace("\\", "/"))
            if p.is_absolute() or ".." in p.parts or str(p) in ("", "."):
                raise RecordError(label, f"path {self.path!r} must be relative to the dataset root, without '..'")
            self.path = p.as_posix()
        if self.data is not None and not isinstance(self.data, bytes):
            self.data = bytes(self.data)
        if not self.path and not self.data:
            raise RecordError(label, "needs a path or image bytes")
        self.meta = _as_dict(self.meta, "meta", label)

    def load(self, root: str | os.PathLike[str] | None = None, **kwargs: Any) -> Image.Image:
        """Decode through the one loader (bytes win; the path is contained in ``root``)."""
        src: Any = self.data if self.data else self.path
        return load_image(src, root=root if not self.data else None, record=self.id, **kwargs)


@dataclass
class UnloadableImageRef(ImageRef):
    """A source row that names no usable image (no path, a path escaping the root...).

    Reading a source never fails on one bad row: the row becomes this ref, which raises its
    :class:`ImageLoadError` when loaded, so each pipeline quarantines it with the reason and goes on.
    """

    reason: str = "unusable image reference"

    def __post_init__(self) -> None:
        self.id = str(self.id)
        self.path = None
        self.data = None

    def load(self, root: str | os.PathLike[str] | None = None, **kwargs: Any) -> Image.Image:
        raise ImageLoadError(self.id, self.reason)


@dataclass
class MCQ(_Record):
    """A multiple-choice question with lettered options (A, B, ...) and one correct letter."""

    question: str
    options: list[str]
    answer: str
    provenance: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    image_id: str | None = None

    kind: ClassVar[str] = "mcq"
    json_fields: ClassVar[tuple[str, ...]] = ("provenance",)

    def label(self) -> str:
        if self.id or self.image_id:
            return super().label()
        q = self.question if isinstance(self.question, str) else repr(self.question)
        return f"mcq {q[:40]!r}"

    def __post_init__(self) -> None:
        label = self.label()
        self.question = _clean_text(self.question, "question", label)
        if isinstance(self.options, str) or not isinstance(self.options, Sequence):
            raise RecordError(label, f"options must be a list of strings, got {type(self.options).__name__}")
        self.options = [_clean_text(o, f"option {i + 1}", label) for i, o in enumerate(self.options)]
        if not 2 <= len(self.options) <= 26:
            raise RecordError(label, f"needs 2 to 26 options, got {len(self.options)}")
        seen: dict[str, int] = {}
        for i, opt in enumerate(self.options):
            key = " ".join(opt.casefold().split())
            if key in seen:
                a, b = self.letters[seen[key]], self.letters[i]
                raise RecordError(label, f"duplicate options {a} and {b}: {opt!r}")
            seen[key] = i
        answer = _clean_text(self.answer, "answer", label).strip("().: ").upper()
        if answer not in self.letters:
            raise RecordError(
                label, f"answer {self.answer!r} is not one of the option letters {', '.join(self.letters)}"
            )
        self.answer = answer
        self.provenance = _as_dict(self.provenance, "provenance", label)

    @property
    def letters(self) -> list[str]:
        return list(string.ascii_uppercase[: len(self.options)])

    @property
    def answer_index(self) -> int:
        return self.letters.index(self.answer)

    @property
    def answer_text(self) -> str:
        return self.options[self.answer_index]

    def format_options(self) -> str:
        """``"A. first\\nB. second"`` — the layout prompts and answer parsers agree on."""
        return "\n".join(f"{letter}. {opt}" for letter, opt in zip(self.letters, self.options, strict=True))


@dataclass
class RubricItem(_Record):
    """One rubric criterion, how a judge decides it passes, and how much it matters."""

    criterion: str
    pass_rule: str
    severity: Severity = "important"
    weight: float | None = None
    """Defaults from the severity: critical 3, important 2, minor 1."""
    id: str | None = None

    kind: ClassVar[str] = "rubric_item"

    def __post_init__(self) -> None:
        label = self.label()
        self.criterion = _clean_text(self.criterion, "criterion", label)
        self.pass_rule = _clean_text(self.pass_rule, "pass_rule", label)
        sev = _clean_text(self.severity, "severity", label).lower()
        if sev not in SEVERITY_WEIGHTS:
            raise RecordError(label, f"severity {self.severity!r} is not one of {', '.join(SEVERITY_WEIGHTS)}")
        self.severity = sev  # type: ignore[assignment]
        if self.weight is None:
            self.weight = SEVERITY_WEIGHTS[sev]
        try:
            self.weight = float(self.weight)
        except (TypeError, ValueError):
            raise RecordError(label, f"weight {self.weight!r} is not a number") from None
        if not math.isfinite(self.weight) or self.weight <= 0:
            raise RecordError(label, f"weight must be a positive number, got {self.weight}")


@dataclass
class Caption(_Record):
    """A caption and how it was made (model, prompt, sampling parameters)."""

    text: str
    model: str
    prompt: str
    sampling: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    image_id: str | None = None

    kind: ClassVar[str] = "caption"
    json_fields: ClassVar[tuple[str, ...]] = ("sampling",)

    def __post_init__(self) -> None:
        label = self.label()
        self.text = _clean_text(self.text, "text", label, allow_empty=True)  # models do say nothing
        self.model = _clean_text(self.model, "model", label)
        self.prompt = _clean_text(self.prompt, "prompt", label, allow_empty=True)
        self.sampling = _as_dict(self.sampling, "sampling", label)


Record = ImageRef | MCQ | RubricItem | Caption
RECORD_TYPES: dict[str, type] = {c.kind: c for c in (ImageRef, MCQ, RubricItem, Caption)}


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
    from .sources.dataset import _find_image_column

    if _find_image_column(cols):
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
        dest.parent.mkdir(parents=True, exist_ok=True)
        ds = records_to_dataset(records, image_mode="path", root=root)
        tmp = dest.with_name(f".{dest.name}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in ds)
        os.replace(tmp, dest)
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
    lines = []
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
        lines.append(json.dumps(row, ensure_ascii=False, default=str))
    (dest / "metadata.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
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
    cls = cls or infer_record_type(source.dataset.column_names)
    if cls is ImageRef:
        return source.image_refs()
    return dataset_to_records(source.dataset, cls)


# Readers of image sources live in vlrl.sources; re-exported here because callers think of them as
# part of the records API.
from .sources import DatasetSource, load_any_dataset  # noqa: E402
from .sources.dataset import undecoded as _undecoded  # noqa: E402

__all__ = [
    "MCQ",
    "RECORD_TYPES",
    "SEVERITY_WEIGHTS",
    "Caption",
    "DatasetSource",
    "ImageRef",
    "Record",
    "RecordError",
    "RubricItem",
    "dataset_to_records",
    "infer_record_type",
    "load_any_dataset",
    "load_records",
    "records_to_dataset",
    "save_imagefolder",
    "save_records",
]
