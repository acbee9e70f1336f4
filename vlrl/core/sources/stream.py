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

import abc
import glob
import logging
import os
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlrl.core.images import IMAGE_EXTENSIONS, ImageLoadError, load_image
from vlrl.core.pipeline import iter_jsonl
from vlrl.core.sources.columns import ID_COLUMNS, IMAGE_COLUMNS, VIDEO_COLUMNS
from vlrl.core.sources.dataset import load_disk_dataset, undecoded

logger = logging.getLogger(__name__)

KINDS = ("folder", "manifest", "hf", "wds")


@dataclass
class ImageItem:
    image_id: str
    locator: dict[str, Any]
    """How to read the image again from any process (see :func:`read_locator`)."""
    data: bytes | None = None
    """Encoded bytes when the source already read them (tar members, parquet/Arrow rows)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Extra scalar columns of the manifest row (available to prompt templates)."""
    error: str | None = None
    """Why the row names no usable image (the item is kept so the reason reaches its record)."""

    @classmethod
    def from_path(cls, image_id: str, path: str | os.PathLike[str], meta: dict[str, Any] | None = None,
                  error: str | None = None) -> ImageItem:
        """An item for an image file (absolute, or relative to the working directory)."""
        return cls(str(image_id), {"kind": "file", "path": str(path)}, meta=dict(meta or {}), error=error)

    @property
    def path(self) -> str:
        """The image file's path for file items (``""`` for bytes, tar members and dataset rows)."""
        return str(self.locator.get("path", "")) if self.locator.get("kind") == "file" else ""

    def payload(self) -> Any:
        """What :func:`vlrl.core.images.load_image` should open: bytes, or a path / HF image struct."""
        return self.data if self.data is not None else read_locator(self.locator)

    def open(self, max_pixels: int | None = None, **kwargs: Any) -> Any:
        """Decode the image; raises :class:`~vlrl.core.images.ImageLoadError` with a one-line reason.

        ``max_pixels`` is the Qwen resize budget; ``kwargs`` reach :func:`load_image` (e.g.
        ``max_pixels_limit``, the decompression-bomb limit)."""
        if self.error:
            raise ImageLoadError(self.image_id, self.error)
        root = self.locator.get("root") if self.data is None else None
        if self.locator.get("media") == "video":
            return self._open_video(root)
        return load_image(self.payload(), root=root, record=self.image_id, max_pixels=max_pixels, **kwargs)

    def _open_video(self, root: str | None) -> Any:
        """A video item's frames (:func:`vlrl.core.video.load_video_value`): a file under the same
        root rule as images (a symlink or path out of the source is refused, never opened), or the
        encoded bytes a manifest row or dataset row holds."""
        from vlrl.core.video import load_video_value

        return load_video_value(self.payload(), root=root, record=self.image_id)


class ImageSource(abc.ABC):
    """Base class: iterate :class:`ImageItem` lazily; ``count()`` is cheap or ``None``.

    ``iter_items(with_data=False)`` lists ids and locators without reading image bytes where the
    layout allows (tar headers are skipped over by seeking, image columns are not read): that is
    what the Ray driver needs, and what counting for the progress bar needs.
    """

    kind = "base"

    def __init__(self, root: str | Path) -> None:
        self.root = str(root)

    @abc.abstractmethod
    def iter_items(self, with_data: bool = True) -> Iterator[ImageItem]:
        """Yield the source's items in a stable order (bytes read only when ``with_data``)."""

    def __iter__(self) -> Iterator[ImageItem]:
        return self.iter_items(with_data=True)

    def count(self) -> int | None:
        return None

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.root}


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
        media = {"media": "video"} if self.media == "video" else {}
        for rel in self._walk():
            yield ImageItem(rel, {"kind": "file", "path": os.path.join(root, rel), "root": root, **media})

    def count(self) -> int | None:
        return sum(1 for _ in self._walk())

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), **({"media": "video"} if self.media == "video" else {})}


# -- manifest (jsonl / parquet) --------------------------------------------------------------------


def bad_locator(reason: str) -> dict[str, Any]:
    """The locator of a record that names no usable image: reading it raises with ``reason``, so the
    job quarantines that one record and goes on."""
    return {"kind": "bad", "reason": reason}


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
        return {**super().describe(), **({"media": "video"} if self.media == "video" else {})}

    def _media(self, locator: dict[str, Any]) -> dict[str, Any]:
        return {**locator, "media": "video"} if self.media == "video" and locator.get("kind") != "bad" else locator

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
        media = {"media": "video"} if self.media == "video" else {}
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
        return {**super().describe(), "split": self.split, **({"media": "video"} if self.media == "video" else {})}



# -- WebDataset tar shards ---------------------------------------------------------------------------


def _expand_braces(pattern: str) -> list[str]:
    m = re.search(r"\{(\d+)\.\.(\d+)\}", pattern)
    if not m:
        return [pattern]
    lo, hi = m.group(1), m.group(2)
    width = len(lo)
    out = []
    for k in range(int(lo), int(hi) + 1):
        out.extend(_expand_braces(pattern[: m.start()] + str(k).zfill(width) + pattern[m.end() :]))
    return out


def _split_key(name: str) -> tuple[str, str]:
    """WebDataset rule: the key is everything before the first dot of the basename."""
    d, base = os.path.split(name)
    stem, dot, ext = base.partition(".")
    return (f"{d}/{stem}" if d else stem), ext.lower()


def _shard_name(path: str) -> str:
    """``/data/shards-003.tar.gz`` → ``shards-003``: ids are ``<shard>/<key>``, unique even when two
    shards reuse a key (WebDataset only asks writers to avoid that; a reader must not lose images)."""
    name = os.path.basename(path)
    for ext in (".tar.gz", ".tgz", ".tar"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


class TarShardSource(ImageSource):
    kind = "wds"

    def __init__(self, root: str | Path) -> None:
        super().__init__(root)
        r = str(root)
        if os.path.isdir(r):
            self.shards = sorted(str(p) for p in Path(r).rglob("*") if p.name.endswith((".tar", ".tar.gz", ".tgz")))
        else:
            self.shards = []
            for pat in _expand_braces(r):
                self.shards.extend(sorted(glob.glob(pat)) if any(c in pat for c in "*?[") else [pat])
        if not self.shards:
            raise ValueError(f"{root}: no tar shards found")

    def iter_items(self, with_data: bool = True) -> Iterator[ImageItem]:
        for shard in self.shards:
            shard = os.path.abspath(shard)
            seekable = shard.endswith(".tar")
            prefix = _shard_name(shard)
            try:
                # a plain .tar listed without data is opened seekable: headers are read, data seeked over
                mode = "r:" if seekable and not with_data else "r|*"
                tf = tarfile.open(shard, mode)  # noqa: SIM115 - closed by the with below
            except (OSError, tarfile.TarError) as e:
                logger.warning("%s: cannot open tar shard (%s); skipping it", shard, e)
                continue
            seen: str | None = None
            with tf:
                try:
                    for member in tf:
                        if not member.isfile():
                            continue
                        key, ext = _split_key(member.name)
                        if "." + ext.rsplit(".", 1)[-1] not in IMAGE_EXTENSIONS or key == seen:
                            continue
                        seen = key
                        data = None
                        if with_data:
                            fh = tf.extractfile(member)
                            data = fh.read() if fh is not None else b""
                        loc = (
                            {"kind": "tar", "path": shard, "offset": member.offset_data, "size": member.size}
                            if seekable
                            else {"kind": "tar", "path": shard, "member": member.name}
                        )
                        yield ImageItem(f"{prefix}/{key}", loc, data=data)
                        tf.members.clear()  # TarFile keeps every header it read; a stream needs none
                except (OSError, tarfile.TarError, EOFError) as e:
                    logger.warning("%s: tar shard is damaged after key %s (%s); skipping the rest of it", shard, seen, e)

    def count(self) -> int | None:
        """Samples in uncompressed shards, from their headers (compressed shards: unknown)."""
        if not all(s.endswith(".tar") for s in self.shards):
            return None
        return sum(1 for _ in self.iter_items(with_data=False))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "shards": len(self.shards)}


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
                media: str = "image") -> ImageSource:
    """Open an image source (``media="video"``: a folder of video files); ``kind`` is detected from
    the path when not given."""
    path = str(path)
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


_HANDLES: dict[tuple, Any] = {}


def read_locator(loc: dict[str, Any]) -> Any:
    """Re-read an image from its locator: returns a path or encoded bytes for ``load_image``.

    Used by Ray workers, which receive locators instead of pixels. Open Arrow datasets and parquet
    files are kept per process so each row costs a seek, not a file open.
    """
    kind = loc.get("kind")
    if kind == "file":
        return loc["path"]  # load_image resolves it under loc["root"] and refuses escapes
    if kind == "tar":
        if "offset" in loc:
            with open(loc["path"], "rb") as fh:
                fh.seek(loc["offset"])
                return fh.read(loc["size"])
        with tarfile.open(loc["path"], "r:*") as tf:
            fh = tf.extractfile(loc["member"])
            return fh.read() if fh is not None else b""
    if kind == "hf":
        key = ("hf", loc["path"], loc.get("split"))
        if key not in _HANDLES:
            ds, _ = load_disk_dataset(loc["path"], loc.get("split"))
            _HANDLES[key] = undecoded(ds)
        value = _HANDLES[key][int(loc["index"])][loc["column"]]
        return value
    if kind == "parquet":
        key = ("parquet", loc["path"], loc["row_group"], loc["column"])
        if key not in _HANDLES:
            import pyarrow.parquet as pq

            for k in [k for k in _HANDLES if k[0] == "parquet"]:
                del _HANDLES[k]  # keep one row group per process
            _HANDLES[key] = pq.ParquetFile(loc["path"]).read_row_group(loc["row_group"], columns=[loc["column"]])
        return _HANDLES[key].column(0)[int(loc["index"])].as_py()
    if kind == "missing":
        return {"bytes": None, "path": None}
    if kind == "bad":
        from vlrl.core.images import ImageLoadError

        raise ImageLoadError(loc.get("id", "<record>"), loc["reason"])
    raise ValueError(f"unreadable locator {loc!r}")
