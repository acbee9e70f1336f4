"""Where RubiCap jobs read images and captions from.

``--images SRC`` accepts whatever :func:`vlrl.core.sources.load_any_dataset` reads: a folder of images
(the id is the relative path), an imagefolder, a JSONL/parquet manifest, or a ``save_to_disk``
folder. Images stored as bytes are written once to a folder next to the job's output so later stages
and audit rows can point at a file.

Every record is an :class:`ImageItem` with a stable ``image_id`` — the key that makes jobs
resumable. Captions files (``--captions``, ``--reference``, precomputed contestants) are JSONL rows
``{"image_id", "caption"}``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import read_jsonl

logger = logging.getLogger(__name__)

_ID_FIELDS = ("image_id", "id")


@dataclass(frozen=True)
class ImageItem:
    image_id: str
    image: str
    """Path of the image file."""
    extra: tuple[tuple[str, Any], ...] = ()
    """Other manifest fields (kept as pairs so the item stays hashable)."""
    error: str | None = None
    """Why the row names no usable image (it is quarantined when opened)."""

    def extras(self) -> dict[str, Any]:
        return dict(self.extra)


def iter_images(src: str | Path, materialize_dir: str | Path | None = None) -> Iterator[ImageItem]:
    """Yield the images of any source :func:`vlrl.core.sources.load_any_dataset` reads.

    The id is the row's ``image_id`` (else ``id``, else its path).
    """
    from vlrl.core.sources import load_any_dataset

    source = load_any_dataset(src)
    root = source.root.resolve()
    out_dir = Path(materialize_dir) if materialize_dir else root / f"{Path(src).name}_images"
    from vlrl.core.records import UnloadableImageRef

    for ref in source.image_refs():
        if isinstance(ref, UnloadableImageRef):
            yield ImageItem(ref.id, "", (), error=ref.reason)
            continue
        meta = dict(ref.meta)
        image_id = str(meta.pop("image_id", None) or ref.id)
        if ref.path and (root / ref.path).exists():
            path = str((root / ref.path).resolve())
        elif ref.data:
            out_dir.mkdir(parents=True, exist_ok=True)
            fname = out_dir / (hashlib.sha1(image_id.encode()).hexdigest()[:16] + ".img")
            if not fname.exists():
                fname.write_bytes(ref.data)
            path = str(fname)
        else:
            path = str(root / ref.path) if ref.path else ""  # missing file: the loader reports it per record
        yield ImageItem(image_id, path, _freeze(meta))


def load_images(src: str | Path, materialize_dir: str | Path | None = None) -> list[ImageItem]:
    """All images of ``src``, first occurrence of each id kept."""
    seen: set[str] = set()
    out = []
    for it in iter_images(src, materialize_dir):
        if it.image_id in seen:
            logger.warning("%s: duplicate image id %r, keeping the first", src, it.image_id)
            continue
        seen.add(it.image_id)
        out.append(it)
    return out


def _freeze(meta: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple((k, json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in sorted(meta.items()))


def read_captions(path: str | Path) -> dict[str, str]:
    """``image_id → caption`` from a JSONL captions file (fields ``image_id``/``id`` and ``caption``)."""
    out: dict[str, str] = {}
    for n, row in enumerate(read_jsonl(path), 1):
        image_id = next((str(row[f]) for f in _ID_FIELDS if row.get(f) is not None), None)
        caption = row.get("caption", row.get("text", row.get("reference")))
        if image_id is None or not isinstance(caption, str):
            raise ValueError(f"{path}: row {n} needs 'image_id' and a string 'caption'")
        out[image_id] = caption
    return out


def open_image(path: str, record: object = None):
    """Load an image for a model request through vlrl's one loader (raises ``ImageLoadError``)."""
    from vlrl.core.images import load_image

    return load_image(path, record=record or path)


def open_item(item: ImageItem):
    """Load an :class:`ImageItem`'s image, raising ``ImageLoadError`` with the reason for a bad row."""
    if item.error:
        from vlrl.core.images import ImageLoadError

        raise ImageLoadError(item.image_id, item.error)
    return open_image(item.image, record=item.image_id)
