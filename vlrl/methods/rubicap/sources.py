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
from pathlib import Path
from typing import Any

from vlrl.core.images import ImageLoadError, resolve_under_root
from vlrl.core.sources import ImageItem

logger = logging.getLogger(__name__)


def iter_images(src: str | Path, materialize_dir: str | Path | None = None) -> Iterator[ImageItem]:
    """Yield the images of any source :func:`vlrl.core.sources.load_any_dataset` reads.

    The id is the row's ``image_id`` (else ``id``, else its path). A path that leaves the source
    (a symlink out of the folder, ``..``, an absolute path elsewhere) is an item with an error,
    never opened: the same rule as ``vlrl caption`` and ``qa-curate`` (:func:`resolve_under_root`).
    """
    from vlrl.core.sources import load_any_dataset

    source = load_any_dataset(src)
    root = source.root.resolve()
    out_dir = Path(materialize_dir) if materialize_dir else root / f"{Path(src).name}_images"
    from vlrl.core.records import UnloadableImageRef

    for ref in source.image_refs():
        if isinstance(ref, UnloadableImageRef):
            yield ImageItem.from_path(ref.id, "", error=ref.reason)
            continue
        meta = dict(ref.meta)
        image_id = str(meta.pop("image_id", None) or ref.id)
        if ref.path:
            # one root policy for every command: no symlink, ``..`` or absolute path out of the source
            try:
                resolve_under_root(ref.path, root, ref.path)
            except ImageLoadError as e:
                yield ImageItem.from_path(image_id, "", _flat(meta), error=e.reason)
                continue
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
        yield ImageItem.from_path(image_id, path, _flat(meta))


def load_images(src: str | Path, materialize_dir: str | Path | None = None) -> list[ImageItem]:
    """All images of ``src``, first occurrence of each id kept.

    A later row that reuses an id for *another* image is not dropped with a log line (a reader of
    the outputs would never know): it becomes ``ID#dup-N``, an item with the reason, which the job
    records like any unusable image (as ``qa-curate`` and ``caption`` do). A row repeating the same
    id and image is the same record and is skipped."""
    first: dict[str, ImageItem] = {}
    out: list[ImageItem] = []
    dups: dict[str, int] = {}
    for it in iter_images(src, materialize_dir):
        seen = first.get(it.image_id)
        if seen is None:
            first[it.image_id] = it
            out.append(it)
        elif (seen.path, seen.error) != (it.path, it.error):
            dups[it.image_id] = n = dups.get(it.image_id, 0) + 1
            reason = f"duplicate id {it.image_id!r} names a different image ({it.path or '<bytes>'}); give it a unique id"
            logger.warning("%s: %s", src, reason)
            out.append(ImageItem.from_path(f"{it.image_id}#dup-{n}", "", it.meta, error=reason))
    return out


def _flat(meta: dict[str, Any]) -> dict[str, Any]:
    """Nested values as JSON text, so rows written from ``meta`` keep one scalar per column."""
    return {k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in sorted(meta.items())}
