"""Streamed image sources (used by batch captioning): a corpus is never held in memory.

A re-captioning job walks millions of images, so every source is a lazy iterator of
:class:`ImageItem` — an id, a *locator* (a small JSON-able dict that says how any process can read
the image again) and, when the source had to read the bytes anyway (tar members, parquet or Arrow
rows), the bytes themselves. The local engine decodes ``data`` or the locator in-process; the Ray
engine ships only locators to its workers, which read the image where it lives (so on a cluster the
corpus must sit on storage every node can see).

Supported layouts (``open_source`` picks one from the path; ``kind=`` overrides):

* ``folder`` — a directory tree of image files (also HF *imagefolder* layouts); the id is the path
  relative to the root. Walked one directory at a time in sorted order, so memory holds one
  directory listing, never the whole tree.
* ``manifest`` — a ``.jsonl`` / ``.json`` (JSON lines) or ``.parquet`` file with one row per image:
  an image column (``image``/``image_path``/``path``/``file_name``/``file``) holding a path relative to
  the manifest's folder or an HF image struct ``{"bytes", "path"}``, and optionally an id column
  (``image_id``/``id``/``key``). Parquet is read one record batch at a time.
* ``hf`` — a dataset written by ``Dataset.save_to_disk`` (or a ``DatasetDict``; ``split=`` picks one).
  Arrow files are memory-mapped, and rows are read in small batches with images left undecoded.
* ``wds`` — WebDataset-style tar shards (a ``.tar`` file, a folder of them, a glob or a brace range
  ``shards-{000..009}.tar``). Read as a stream; the id is ``<shard name>/<sample __key__>``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vlrl.core.images import IMAGE_EXTENSIONS
from vlrl.core.pipeline import iter_jsonl
from vlrl.core.sources.columns import ID_COLUMNS, IMAGE_COLUMNS, VIDEO_COLUMNS
from vlrl.core.sources.dataset import load_disk_dataset, undecoded
from vlrl.core.sources.items import ImageItem as ImageItem
from vlrl.core.sources.items import ImageSource as ImageSource
from vlrl.core.sources.items import bad_locator as bad_locator
from vlrl.core.sources.items import read_locator as read_locator
from vlrl.core.sources.tarshards import TarShardSource

logger = logging.getLogger(__name__)

KINDS = ("folder", "manifest", "hf", "wds")


# -- folder ---------------------------------------------------------------------------------------


class FolderSource(ImageSource):
    kind = "folder"

    def __init__(self, root: str | Path, media: str = "image") -> None:
        super().__init__(root)
        from vlrl.core.video import VIDEO_EXTENSIONS

        self.media = media
        self.extensions = VIDEO_EXTENSIONS if media == "video" else IMAGE_EXTENSIONS

    def _walk(self) -> Iterator[str]:
        """Relative POSIX paths, depth-first, sorted per directory; hidden entries skipped."""
        base = Path(self.root)
        stack = [""]
        while stack:
            rel = stack.pop()
            try:
                entries = sorted(os.scandir(base / rel), key=lambda e: e.name)
            except OSError as e:
                logger.warning("%s: cannot list directory (%s)", base / rel, e)
                continue
            subdirs = []
            for e in entries:
                if e.name.startswith("."):
                    continue
                name = f"{rel}/{e.name}" if rel else e.name
                if e.is_dir(follow_symlinks=False):
                    subdirs.append(name)
                elif Path(e.name).suffix.lower() in self.extensions:
                    yield name
            stack.extend(reversed(subdirs))

    def iter_items(self, with_data: bool = True) -> Iterator[ImageItem]:
        root = os.path.abspath(self.root)
        media = self.video_marks()
        for rel in self._walk():
            yield ImageItem(rel, {"kind": "file", "path": os.path.join(root, rel), "root": root, **media})

    def count(self) -> int | None:
        return sum(1 for _ in self._walk())

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), **self.video_marks(describe=True)}


# -- manifest (jsonl / parquet) --------------------------------------------------------------------


def _pick(columns: Any, candidates: tuple[str, ...], what: str, path: str, required: bool = True) -> str | None:
    for c in candidates:
        if c in columns:
            return c
    if required:
        raise ValueError(f"{path}: no {what} column (expected one of {', '.join(candidates)}; found {sorted(columns)})")
    return None


class ManifestSource(ImageSource):
    kind = "manifest"

    def __init__(self, root: str | Path, *, image_column: str | None = None, id_column: str | None = None,
                 media: str = "image") -> None:
        super().__init__(root)
        self.media = media
        self.columns = VIDEO_COLUMNS if media == "video" else IMAGE_COLUMNS
        self.base = os.path.dirname(os.path.abspath(self.root))
        self.image_column = image_column
        self.id_column = id_column
        self.is_parquet = str(root).endswith(".parquet")

    def _item(self, row: dict[str, Any], img_col: str | None, id_col: str | None, n: int, locator: dict) -> ImageItem:
        if img_col is None:  # a row without any image column: quarantined with the reason, the job goes on
            image_id = str(row[id_col]) if id_col and row.get(id_col) is not None else f"{Path(self.root).name}:{n}"
            return ImageItem(image_id, bad_locator(f"row has no {self.media} column (expected one of {', '.join(self.columns)})"))
        if img_col not in row:  # listing without the image column: the row's locator says where it is
            meta = {k: v for k, v in row.items() if k != id_col and isinstance(v, (str, int, float, bool))}
            return ImageItem(str(row[id_col]), self._media(locator), meta=meta)
        value = row.get(img_col)
        if self.media == "video" and isinstance(value, (list, tuple)):  # ``videos``: the row's first video
            value = value[0] if value else None
        if self.media == "video" and isinstance(value, dict) and "video" in value and "path" not in value:
            value = value["video"]  # verl's {"video": path}
        data = None
        if isinstance(value, dict):  # HF image struct
            data = value.get("bytes")
            path = value.get("path")
            if isinstance(data, str):  # {"bytes": "<a path>"}: a path, and it gets the same root policy as any path
                data, path = None, data
        else:
            path = value
        if path is not None and not isinstance(path, str) or data is not None and not isinstance(data, (bytes, bytearray)):
            image_id = str(row[id_col]) if id_col and row.get(id_col) is not None else f"{Path(self.root).name}:{n}"
            bad = path if path is not None and not isinstance(path, str) else data
            return ImageItem(image_id, bad_locator(f"{img_col!r} is {type(bad).__name__} {str(bad)[:40]!r}, not a path or image bytes"))
        if id_col is not None and row.get(id_col) is not None:
            image_id = str(row[id_col])
        elif path:
            image_id = os.path.relpath(os.path.join(self.base, path), self.base) if not os.path.isabs(path) else path
            image_id = Path(image_id).as_posix()
        else:
            image_id = f"{Path(self.root).name}:{n}"
        if data is None:
            # one root policy for every command: a path, relative or absolute, must stay under the
            # manifest's folder (as qa-curate, teacher-captions and the evaluations require)
            locator = {"kind": "file", "path": str(path), "root": self.base} if path else {"kind": "missing"}
        meta = {k: v for k, v in row.items() if k not in (img_col, id_col) and isinstance(v, (str, int, float, bool))}
        return ImageItem(image_id, self._media(locator), data=data, meta=meta)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), **self.video_marks(describe=True)}

    def _media(self, locator: dict[str, Any]) -> dict[str, Any]:
        return {**locator, **self.video_marks()} if locator.get("kind") != "bad" else locator

    def _iter_jsonl(self) -> Iterator[ImageItem]:
        n = 0
        name = Path(self.root).name
        for lineno, row, reason in iter_jsonl(self.root):
            if row is None:  # one bad line is one quarantined record with its reason, never the end of the file
                why = f"line {lineno}: {reason}"
                yield ImageItem(f"{name}:line{lineno}", bad_locator(why), error=why)
                continue
            img_col = self.image_column if self.image_column else _pick(row, self.columns, self.media, f"{self.root}:{lineno}", required=False)
            if self.image_column and self.image_column not in row:
                img_col = None
            id_col = self.id_column or _pick(row, ID_COLUMNS, "id", self.root, required=False)
            yield self._item(row, img_col, id_col, n, {})
            n += 1

    def _iter_parquet(self, with_data: bool) -> Iterator[ImageItem]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(self.root)
        schema = pf.schema_arrow
        img_col = self.image_column or _pick(schema.names, self.columns, self.media, self.root)
        id_col = self.id_column or _pick(schema.names, ID_COLUMNS, "id", self.root, required=False)
        columns = None
        kind = schema.field(img_col).type
        embedded = not (pa.types.is_string(kind) or pa.types.is_large_string(kind)
                        or pa.types.is_list(kind) and pa.types.is_string(kind.value_type))
        if not with_data and embedded and id_col is not None:
            columns = [c for c in schema.names if c != img_col]  # ids and locators only: skip the bytes
        n = 0
        for g in range(pf.num_row_groups):
            index = 0
            for batch in pf.iter_batches(batch_size=64, row_groups=[g], columns=columns):
                for row in batch.to_pylist():
                    loc = {"kind": "parquet", "path": os.path.abspath(self.root), "row_group": g, "index": index, "column": img_col}
                    yield self._item(row, img_col, id_col, n, loc)
                    n += 1
                    index += 1

    def iter_items(self, with_data: bool = True) -> Iterator[ImageItem]:
        return self._iter_parquet(with_data) if self.is_parquet else self._iter_jsonl()

    def count(self) -> int | None:
        if self.is_parquet:
            import pyarrow.parquet as pq

            return pq.ParquetFile(self.root).metadata.num_rows
        with open(self.root, "rb") as fh:
            return sum(1 for line in fh if line.strip())


# -- HF dataset saved to disk ------------------------------------------------------------------------


class HFDiskSource(ImageSource):
    kind = "hf"

    def __init__(self, root: str | Path, *, split: str | None = None, image_column: str | None = None, id_column: str | None = None,
                 media: str = "image") -> None:
        super().__init__(root)
        self.media = media
        self.split = split
        self.image_column = image_column
        self.id_column = id_column

    def iter_items(self, with_data: bool = True) -> Iterator[ImageItem]:
        ds, split = load_disk_dataset(self.root, self.split)
        img_col = self.image_column or _pick(ds.column_names, VIDEO_COLUMNS if self.media == "video" else IMAGE_COLUMNS,
                                             self.media, self.root)
        id_col = self.id_column or _pick(ds.column_names, ID_COLUMNS, "id", self.root, required=False)
        ds = undecoded(ds)
        media = self.video_marks()
        root = os.path.abspath(self.root)
        if not with_data:
            rest = [c for c in ds.column_names if c != img_col]
            ds = ds.select_columns(rest) if rest else None
            n_rows = len(load_disk_dataset(self.root, self.split)[0])
            batches = ds.iter(batch_size=256) if ds is not None else ({"__row__": list(range(k, min(k + 256, n_rows)))} for k in range(0, n_rows, 256))
            i = 0
            for batch in batches:
                cols = list(batch)
                for j in range(len(batch[cols[0]])):
                    row = {c: batch[c][j] for c in cols if c != "__row__"}
                    image_id = str(row[id_col]) if id_col is not None and row.get(id_col) is not None else str(i)
                    meta = {k: v for k, v in row.items() if k != id_col and isinstance(v, (str, int, float, bool))}
                    yield ImageItem(image_id, {"kind": "hf", "path": root, "split": split, "index": i, "column": img_col, **media}, meta=meta)
                    i += 1
            return
        i = 0
        for batch in ds.iter(batch_size=64):
            cols = list(batch)
            for j in range(len(batch[img_col])):
                row = {c: batch[c][j] for c in cols}
                value = row[img_col]
                if media and isinstance(value, (list, tuple)):  # ``videos``: the row's first video
                    value = value[0] if value else None
                data = value.get("bytes") if isinstance(value, dict) else None
                path = value.get("path") if isinstance(value, dict) else value
                image_id = str(row[id_col]) if id_col is not None and row.get(id_col) is not None else str(i)
                loc = {"kind": "hf", "path": root, "split": split, "index": i, "column": img_col, **media}
                if data is None and path:
                    # a dataset row's path: images keep their historical rule (as named); a video
                    # must stay under the dataset's parent folder, like any manifest's path
                    loc = {"kind": "file", "path": str(path), "root": os.path.dirname(root) if media else None, **media}
                meta = {k: v for k, v in row.items() if k not in (img_col, id_col) and isinstance(v, (str, int, float, bool))}
                yield ImageItem(image_id, loc, data=data, meta=meta)
                i += 1

    def count(self) -> int | None:
        ds, _ = load_disk_dataset(self.root, self.split)
        return len(ds)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "split": self.split, **self.video_marks(describe=True)}



# -- opening and re-reading ---------------------------------------------------------------------------


def detect_kind(path: str) -> str:
    p = Path(path)
    if p.is_dir():
        if (p / "dataset_info.json").exists() or (p / "dataset_dict.json").exists() or (p / "state.json").exists():
            return "hf"
        has_tar = any(q.name.endswith((".tar", ".tar.gz", ".tgz")) for q in p.iterdir())
        has_img = any(q.suffix.lower() in IMAGE_EXTENSIONS or q.is_dir() for q in p.iterdir() if not q.name.startswith("."))
        return "wds" if has_tar and not has_img else "folder"
    name = p.name.lower()
    if name.endswith((".jsonl", ".json", ".parquet")):
        return "manifest"
    if name.endswith((".tar", ".tar.gz", ".tgz")) or "{" in name or "*" in name:
        return "wds"
    if not p.exists():
        raise FileNotFoundError(f"--images {path}: no such file or directory")
    raise ValueError(f"--images {path}: cannot tell the source type; pass --source-type ({'|'.join(KINDS)})")


def open_source(path: str | Path, kind: str | None = None, *, split: str | None = None, image_column: str | None = None, id_column: str | None = None,
                media: str = "image", video: dict[str, Any] | None = None) -> ImageSource:
    """Open an image source (``media="video"``: videos, sampled by ``video``, qwen-vl-utils' keys of
    :class:`vlrl.core.video.VideoSpec`); ``kind`` is detected from the path when not given."""
    source = _open(str(path), kind, split, image_column, id_column, media)
    source.video = dict(video or {}) if media == "video" else {}
    return source


def _open(path: str, kind: str | None, split: str | None, image_column: str | None, id_column: str | None, media: str) -> ImageSource:
    kind = kind or detect_kind(path)
    if media == "video" and kind == "wds":
        raise ValueError(f"--videos {path}: videos are read from a folder, a JSONL/parquet manifest or a save_to_disk dataset")
    if kind == "folder":
        if not os.path.isdir(path):
            raise NotADirectoryError(f"--{media}s {path}: not a directory")
        return FolderSource(path, media=media)
    if kind == "manifest":
        if not os.path.isfile(path):
            raise FileNotFoundError(f"--images {path}: manifest file not found")
        return ManifestSource(path, image_column=image_column, id_column=id_column, media=media)
    if kind == "hf":
        return HFDiskSource(path, split=split, image_column=image_column, id_column=id_column, media=media)
    if kind == "wds":
        return TarShardSource(path)
    raise ValueError(f"unknown source type {kind!r} (expected one of {', '.join(KINDS)})")
