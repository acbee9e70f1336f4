"""Typed records for what vlrl stores: types that validate themselves; only ``ImageRef.load`` reads a file.

Every dataset vlrl builds is a list of a few kinds of record: an image reference, a
multiple-choice question (CapRL's QA pairs), a rubric item (RubiCap's criteria) and a caption.
They are plain dataclasses that validate themselves on construction, so a malformed MCQ (answer
letter not among the options, duplicate options) is refused with a one-line :class:`RecordError`
naming the record the moment it is read — not three stages later as a wrong reward. There is one
type per concept: CapRL's stages, the reward and Prism use this :class:`MCQ`, and RubiCap's schema
uses this :data:`Severity`.

Reading and writing them (JSONL, parquet, ``save_to_disk``, imagefolder) lives in
:mod:`vlrl.core.sources.records_io`; finding images in any layout in :mod:`vlrl.core.sources`.
Free-form dict fields (provenance, sampling parameters, image metadata) are stored as JSON strings:
Arrow would otherwise unify their keys across rows into one struct type, filling absent keys with
nulls and failing on mixed value types, and the round trip would not give back what went in.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from vlrl.core.images import (
    ImageLoadError,
    load_image,
)

if TYPE_CHECKING:
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


def as_dict(value: Any, what: str, label: str) -> dict[str, Any]:
    """A dict field from a record (None or "" is empty; a JSON string, the column form datasets
    store, is decoded); anything else is a :class:`RecordError` naming ``what`` and ``label``."""
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
        self.meta = as_dict(self.meta, "meta", label)

    def load(self, root: str | os.PathLike[str] | None = None, **kwargs: Any) -> Image.Image:
        """Decode through the one loader (bytes win; the path is contained in ``root``)."""
        src: Any = self.data if self.data else self.path
        return load_image(src, root=root if not self.data else None, record=self.id, **kwargs)


@dataclass
class VideoRef(ImageRef):
    """A video of a dataset: the same path/bytes rules as :class:`ImageRef`, decoded into the frames
    a Qwen-VL model sees (:func:`vlrl.core.video.load_video_value`) instead of one image.

    A subclass, so every job that walks a dataset's refs (QA curation, export, Prism) takes videos
    through the code it runs for images; only loading differs. Image-only settings (``max_pixels``
    and the decompression-bomb limit) do not apply to a video and are ignored."""

    kind: ClassVar[str] = "video"

    def load(self, root: str | os.PathLike[str] | None = None, **kwargs: Any) -> Any:
        from vlrl.core.video import load_video_value

        src: Any = self.data if self.data else self.path
        return load_video_value(src, root=root if not self.data else None, record=self.id)


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
        self.provenance = as_dict(self.provenance, "provenance", label)

    @property
    def letters(self) -> list[str]:
        return list(string.ascii_uppercase[: len(self.options)])

    @property
    def answer_index(self) -> int:
        return self.letters.index(self.answer)

    @property
    def answer_letter(self) -> str:
        return self.answer

    @property
    def answer_text(self) -> str:
        return self.options[self.answer_index]

    @property
    def key(self) -> str:
        """Stable identity of the question (order of options included; ids and provenance not)."""
        blob = json.dumps([self.question, list(self.options), self.answer_index], ensure_ascii=False)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def as_question(self) -> dict[str, Any]:
        """``{"question", "options", "answer"}``: the question alone, as QA datasets store it."""
        return {"question": self.question, "options": list(self.options), "answer": self.answer}

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
    """Defaults from the severity: critical 3, important 2, minor 1. A negative weight marks a
    *pitfall* (Rubrics-as-Rewards): a criterion that describes a mistake, such as a hallucinated
    object, and costs its weight when a caption meets it."""
    id: str | None = None

    kind: ClassVar[str] = "rubric_item"

    @property
    def pitfall(self) -> bool:
        """Meeting this criterion is a mistake (negative weight)."""
        return float(self.weight or 0.0) < 0

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
        if not math.isfinite(self.weight) or self.weight == 0:
            raise RecordError(label, f"weight must be positive (or negative for a pitfall), got {self.weight}")


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
        self.sampling = as_dict(self.sampling, "sampling", label)


Record = ImageRef | MCQ | RubricItem | Caption


__all__ = [
    "MCQ",
    "SEVERITY_WEIGHTS",
    "Caption",
    "ImageRef",
    "Record",
    "RecordError",
    "RubricItem",
    "UnloadableImageRef",
    "as_dict",
]
