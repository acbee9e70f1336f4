"""Random access to an image dataset of any layout, without letting ``datasets`` decode a pixel.

QA curation, the Prism eval, RubiCap jobs and ``vlrl data check`` all start from "some images": a folder of
files, an HF ``imagefolder``, a JSONL or parquet file (or a folder of them), or a ``save_to_disk``
folder someone made with the Image feature. :func:`load_any_dataset` recognises the layout and
returns a :class:`DatasetSource` that knows the *dataset root* its relative paths resolve against.

Two choices worth knowing:

* Image columns are cast to ``Image(decode=False)``: ``datasets`` would otherwise open files with
  PIL itself, bypassing the refusals of :func:`vlrl.core.images.load_image` (root containment, pixel
  limit, truncation) and crashing an iteration on the first bad file.
* Parquet is read with pyarrow directly and imagefolder metadata is parsed here rather than through
  ``load_dataset``: both avoid the HF cache, which would copy every image byte of a large source
  before the first one is checked. The layout is HF's own, so ``load_dataset("imagefolder")`` reads
  the same folders.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vlrl.core.images import IMAGE_EXTENSIONS, ImageLoadError, iter_image_files, load_image
from vlrl.core.pipeline import iter_jsonl, read_jsonl
from vlrl.core.records import ImageRef, RecordError, UnloadableImageRef, VideoRef, as_dict
from vlrl.core.sources.columns import IMAGE_COLUMNS, VIDEO_COLUMNS

if TYPE_CHECKING:
    import datasets
    from PIL import Image

logger = logging.getLogger(__name__)

_METADATA_FILES = ("metadata.jsonl", "metadata.csv")


def find_image_column(columns: Iterable[str], media: str = "image") -> str | None:
    """The first of the usual image (``media="video"``: video) column names that ``columns`` has
    (how a dataset of images is told from a dataset of records), or None."""
    cols = set(columns)
    return next((c for c in (VIDEO_COLUMNS if media == "video" else IMAGE_COLUMNS) if c in cols), None)


def _cell(value: Any, media: str) -> Any:
    """A media cell as one ``{"bytes", "path"}``-or-path value: a video row's ``videos`` list gives
    its first video, and verl's ``{"video": path}`` its path (images are stored as they are)."""
    if media != "video":
        return value
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    if isinstance(value, dict) and "video" in value and not value.get("path") and not value.get("bytes"):
        value = value["video"]
    return value


@dataclass
class DatasetSource:
    """An image dataset of any layout: its rows, where relative image paths resolve, and the root
    no image may escape.

    ``dataset`` keeps every column of the source; image columns are left undecoded (paths or
    ``{"bytes", "path"}`` dicts) so pixels only ever come from :func:`vlrl.core.images.load_image`.
    ``base`` is the folder relative paths are relative to; ``root`` is the containment boundary
    (the same folder unless the caller named a different root for an image folder or imagefolder).
    Prefer :meth:`load_image` (which applies both); an :class:`ImageRef` from :meth:`image_refs`
    holds a path relative to ``base``, so ``ref.load(root=source.root)`` is right whenever
    ``base == root``, which is always the case unless ``root=`` was given for a folder source.
    """

    dataset: datasets.Dataset
    root: Path
    kind: str
    image_column: str | None = None
    base: Path | None = None
    skipped: list[dict[str, str]] = field(default_factory=list)
    media: str = "image"
    """``video``: the media column holds videos (:class:`~vlrl.core.records.VideoRef`, decoded by
    :func:`vlrl.core.video.load_video_value`); every other rule is the images'."""
    """Files or lines seen but not listed (``{"path", "reason"}``): names Arrow cannot hold (not
    UTF-8), a manifest's bad lines (``FILE:LINE``). Each is also an :class:`UnloadableImageRef` of
    :meth:`image_refs`, so every job quarantines it with its reason instead of aborting."""

    def __post_init__(self) -> None:
        self.dataset = undecoded(self.dataset)
        self.root = Path(self.root)
        self.base = self.root if self.base is None else Path(self.base)
        if self.image_column is None:
            self.image_column = find_image_column(self.dataset.column_names, self.media)

    def __len__(self) -> int:
        return len(self.dataset)

    def _id(self, i: int, row: dict[str, Any]) -> str:
        """The row's ``id``, else its ``image_id`` (what ``vlrl caption`` keys on, so ids chain from
        one command to the next), else its image path, else its index."""
        for key in ("id", "image_id"):
            if row.get(key) not in (None, ""):
                return str(row[key])
        value = _cell(row.get(self.image_column), self.media) if self.image_column else None
        path = value.get("path") if isinstance(value, dict) else value
        return str(path) if isinstance(path, str) and path else str(i)

    def _src(self, value: Any) -> Any:
        """A path value as :func:`load_image` should get it alongside ``root=self.root``."""
        if isinstance(value, str) and value and self.base != self.root and not Path(value).is_absolute():
            return str(self.base / value)  # absolute; the loader still checks it stays in root
        return value

    def iter_images(self) -> Iterator[tuple[str, Any]]:
        """``(label, src)`` pairs for ``load_image(src, root=self.root)``: the label is the relative
        path when the image is a path, else the record id; ``src`` is a path, bytes or ``None``.

        Raises ``ValueError`` at once (not on first iteration) if the source has no image column.
        """
        if self.image_column is None:
            raise ValueError(f"{self.kind} source has no {self.media} column (looked for "
                             f"{', '.join(VIDEO_COLUMNS if self.media == 'video' else IMAGE_COLUMNS)})")
        return self._iter_images(self.image_column)

    def _iter_images(self, column: str) -> Iterator[tuple[str, Any]]:
        for i, row in enumerate(self.dataset):
            value = _cell(row[column], self.media)
            if isinstance(value, dict):
                if value.get("bytes"):
                    yield self._id(i, row), value["bytes"]
                    continue
                value = value.get("path")
            yield (value if isinstance(value, str) and value else self._id(i, row)), self._src(value)

    def load_image(self, i: int, **kwargs: Any) -> Image.Image:
        """Decode row ``i``'s image through the one loader, contained in :attr:`root`."""
        row = self.dataset[i]
        value = _cell(row[self.image_column], self.media) if self.image_column else None
        rid = self._id(i, row)
        if self.media == "video":  # a Clip of the row's video, under the same root rule
            from vlrl.core.video import load_video_value

            if isinstance(value, dict) and value.get("bytes"):
                return load_video_value(value["bytes"], record=rid)
            path = value.get("path") if isinstance(value, dict) else value
            if not path:
                raise ImageLoadError(rid, "row has no video")
            return load_video_value(self._src(path), root=self.root, record=rid)
        if isinstance(value, dict) and value.get("bytes"):
            return load_image(value["bytes"], record=rid, **kwargs)
        path = value.get("path") if isinstance(value, dict) else value
        if not path:
            raise ImageLoadError(rid, "row has no image")
        return load_image(self._src(path), root=self.root, record=rid, **kwargs)

    def image_refs(self) -> list[ImageRef]:
        """Every row as an :class:`ImageRef` (paths relative to :attr:`base`); columns other than
        id/image/path go to ``meta``."""
        refs: list[ImageRef] = [UnloadableImageRef(id=s["path"], reason=s["reason"]) for s in self.skipped]
        skip = {"id", "meta", "path", self.image_column}
        assert self.base is not None
        ref_type = VideoRef if self.media == "video" else ImageRef
        for i, row in enumerate(self.dataset):
            value = _cell(row.get(self.image_column), self.media) if self.image_column else None
            data, path = (value.get("bytes"), value.get("path")) if isinstance(value, dict) else (None, value)
            if isinstance(data, str):  # {"bytes": "<a path>"}: a path, under the same root policy as any path
                data, path = None, data
            if isinstance(row.get("path"), str) and row["path"]:
                path = row["path"]  # the relative path column written next to an Image feature
            try:
                if path is not None and not isinstance(path, str):
                    raise ImageLoadError(self._id(i, row), f"image is {type(path).__name__} {str(path)[:40]!r}, not a path or image bytes")
                if path and Path(path).is_absolute():
                    try:
                        path = Path(path).resolve().relative_to(self.base.resolve()).as_posix()
                    except ValueError:
                        raise ImageLoadError(self._id(i, row), f"path {path!r} is outside the dataset root") from None
                meta = as_dict(row.get("meta"), "meta", f"image {self._id(i, row)}")
                meta.update({k: v for k, v in row.items() if k not in skip and v is not None})
                refs.append(ref_type(id=self._id(i, row), path=path or None, data=data or None, meta=meta))
            except (ImageLoadError, RecordError) as e:  # one bad row never aborts a job
                reason = getattr(e, "reason", None) or str(e)
                refs.append(UnloadableImageRef(id=self._id(i, row), reason=reason))
        return refs


def load_any_dataset(src: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None, media: str = "image") -> DatasetSource:
    """Open an image folder, an imagefolder, a JSONL/parquet file or folder, or a ``save_to_disk`` folder.

    Detection: a folder with ``metadata.jsonl``/``metadata.csv`` is an imagefolder; one with
    ``dataset_info.json`` + ``state.json`` (or ``dataset_dict.json``) is a ``save_to_disk`` folder;
    one with image files is a folder of images (ids are relative paths); otherwise its parquet or
    JSONL files are read in name order. A single image file is a one-image folder.

    Where relative image paths resolve: an image folder's or imagefolder's files are relative to
    that folder, and ``root`` (default: the folder) only sets the boundary they must stay in. Paths
    inside a data file (JSONL, parquet, ``save_to_disk``) are relative to ``root``, which defaults
    to the folder holding the file (for ``save_to_disk``, the folder holding that folder).

    ``media="video"``: the same layouts with videos (a folder of video files, rows with a
    ``videos``/``video``/``video_path`` column); refs are :class:`~vlrl.core.records.VideoRef`.
    """
    import datasets

    from vlrl.core.video import VIDEO_EXTENSIONS, iter_video_files

    video = media == "video"
    extensions = VIDEO_EXTENSIONS if video else IMAGE_EXTENSIONS
    files = iter_video_files if video else iter_image_files

    path = Path(src)
    if not path.exists():
        raise FileNotFoundError(f"{src}: no such file or folder")
    base: Path | None = None  # None: relative to root
    skipped: list[dict[str, str]] = []
    if path.is_file():
        default_root = path.parent
        suffix = path.suffix.lower()
        if suffix in (".jsonl", ".json"):
            rows, skipped = _read_json_rows(path)
            ds, kind = _from_rows(rows, src), "jsonl"
        elif suffix == ".parquet":
            ds, kind = _read_parquet(path), "parquet"
        elif suffix in extensions:
            ds, kind, base = (
                datasets.Dataset.from_dict({"id": [path.name], media: [path.name]}),
                "folder",
                path.parent,
            )
        else:
            raise ValueError(f"{src}: unknown dataset file type {suffix!r} (.jsonl, .json, .parquet or an image)")
    elif any((path / m).is_file() for m in _METADATA_FILES):
        ds, kind, default_root, base = _read_imagefolder(path), "imagefolder", path, path
    elif (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        ds, kind, default_root = load_disk_dataset(path)[0], "disk", path.parent
    elif next(files(path), None) is not None:
        ids, skipped = _utf8_names(files(path), path)
        ds, kind, default_root, base = datasets.Dataset.from_dict({"id": ids, media: ids}), "folder", path, path
    elif parquet := sorted(path.glob("*.parquet")):
        ds, kind, default_root = _read_parquet(*parquet), "parquet", path
    elif jsonl := sorted(path.glob("*.jsonl")):
        rows = []
        for f in jsonl:
            more, bad = _read_json_rows(f)
            rows += more
            skipped += bad
        ds, kind, default_root = _from_rows(rows, src), "jsonl", path
    else:
        raise ValueError(f"{src}: no {media}s, imagefolder metadata, save_to_disk files, parquet or JSONL found")
    return DatasetSource(ds, Path(root) if root is not None else default_root, kind, base=base, skipped=skipped, media=media)


def plain_image_folder(src: str | os.PathLike[str]) -> tuple[list[str], list[dict[str, str]]] | None:
    """The image files of a folder that :func:`load_any_dataset` would read as a plain folder of
    images (relative paths, and the names it would skip), or None when it is anything else.

    Listed without ``datasets`` or pandas: a command that only looks at files (``vlrl data
    check``) should not pay seconds of imports for an ``os.walk``.
    """
    path = Path(src)
    if not path.is_dir() or any((path / m).is_file() for m in _METADATA_FILES):
        return None
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        return None
    if next(iter_image_files(path), None) is None:
        return None
    return _utf8_names(iter_image_files(path), path)


def load_disk_dataset(path: str | os.PathLike[str], split: str | None = None) -> tuple[datasets.Dataset, str | None]:
    """A ``save_to_disk`` folder as one ``Dataset`` and the split it came from.

    A ``DatasetDict`` gives ``split``, by default ``"train"`` if it has one, else its first split.
    """
    import datasets

    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        if split is None:
            split = "train" if "train" in loaded else next(iter(loaded))
            logger.info("%s: using split %r of %s", path, split, list(loaded))
        if split not in loaded:
            raise ValueError(f"{path}: no split {split!r} (have {', '.join(loaded)})")
        loaded = loaded[split]
    return loaded, split


def undecoded(ds: datasets.Dataset) -> datasets.Dataset:
    """Cast HF ``Image`` columns to ``decode=False`` so only our loader ever decodes pixels."""
    import datasets

    for name, feat in ds.features.items():
        if isinstance(feat, datasets.Image) and feat.decode:
            ds = ds.cast_column(name, datasets.Image(decode=False))
    return ds


def _read_json_rows(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The rows of a JSONL (or JSON array) manifest, and its bad lines as ``{"path": "FILE:LINE",
    "reason"}``: one bad line (invalid UTF-8, not JSON, not an object) is that record's problem,
    named by file and line, never the end of the job."""
    with open(path, "rb") as fh:
        head = fh.read(1024).lstrip(b"\xef\xbb\xbf \t\r\n")
    rows: list[dict[str, Any]] = []
    bad: list[dict[str, str]] = []
    if head.startswith(b"["):
        try:
            records = json.loads(path.read_text(encoding="utf-8-sig"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ValueError(f"{path}: not a valid JSON array ({' '.join(str(e).split())[:120]})") from None
        for i, r in enumerate(records, 1):
            if isinstance(r, dict):
                rows.append(r)
            else:
                bad.append({"path": f"{path}:{i}", "reason": f"record {i} is not a JSON object"})
    else:
        for lineno, rec, reason in iter_jsonl(path):
            if rec is None:
                bad.append({"path": f"{path}:{lineno}", "reason": reason})
            else:
                rows.append(rec)
    for b in bad:
        logger.warning("%s: bad manifest line, left out: %s", b["path"], b["reason"])
    return rows, bad


def _read_parquet(*files: Path) -> datasets.Dataset:
    """Read parquet without going through the HF cache (which would copy every image byte)."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = [pq.read_table(f) for f in files]
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="default")
    return datasets.Dataset(table)


def _read_imagefolder(folder: Path) -> datasets.Dataset:
    """HF imagefolder layout: ``file_name`` in each metadata file is relative to that file's folder."""
    import csv

    rows: list[dict[str, Any]] = []
    for meta in sorted(p for name in _METADATA_FILES for p in folder.rglob(name)):
        if meta.name.endswith(".csv"):
            with open(meta, newline="", encoding="utf-8") as fh:
                part = list(csv.DictReader(fh))
        else:
            part = list(read_jsonl(meta))
        rel_dir = meta.parent.relative_to(folder)
        for lineno, row in enumerate(part, 1):
            if not isinstance(row, dict) or not isinstance(row.get("file_name"), str):
                raise ValueError(f"{meta}:{lineno}: imagefolder metadata needs a 'file_name' string")  # noqa: TRY004
            row = dict(row)
            name = row.pop("file_name")
            row["image"] = name if rel_dir == Path(".") else (rel_dir / name).as_posix()
            rows.append(row)
    return _from_rows(rows, folder)


def _from_rows(rows: list[dict[str, Any]], where: object) -> datasets.Dataset:
    """Rows → Dataset. A column whose values differ in type across rows (a hand-edited manifest
    with ``"image": 5`` among paths) would make Arrow refuse the whole file; such columns keep each
    row's own value (``Json`` feature) so the bad row fails alone, later, with its own reason."""
    import datasets
    import pyarrow as pa

    try:
        return datasets.Dataset.from_list(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        try:
            return datasets.Dataset.from_list(rows, on_mixed_types="use_json")
        except TypeError:  # a datasets release without Json(): say which file, not a traceback
            raise ValueError(f"{where}: a column holds values of different types ({e})") from None


def _utf8_names(names: Iterable[str], folder: Path) -> tuple[list[str], list[dict[str, str]]]:
    """Split file names into those Arrow can store and those that are not valid UTF-8."""
    good, bad = [], []
    for name in names:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            shown = os.fsencode(name).decode("utf-8", "backslashreplace")
            bad.append({"path": shown, "reason": "file name is not valid UTF-8 (rename the file)"})
            continue
        good.append(name)
    if bad:
        logger.warning("%s: skipping %d file(s) whose names are not valid UTF-8, e.g. %s", folder, len(bad), bad[0]["path"])
    return good, bad
