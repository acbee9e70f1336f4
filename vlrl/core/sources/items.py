"""What a streamed source yields: :class:`ImageItem` (an id, a locator, maybe the bytes) and the
:class:`ImageSource` base, with :func:`read_locator`, which reads an item again from any process.

Split from :mod:`vlrl.core.sources.stream` (whose docstring describes every layout) so that each
layout's module (:mod:`vlrl.core.sources.tarshards` too) depends on these and not on each other.
"""

from __future__ import annotations

import abc
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlrl.core.images import ImageLoadError, load_image
from vlrl.core.sources.dataset import load_disk_dataset, undecoded


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
            if root is None and self.data is None and self.locator.get("kind") in ("parquet", "hf"):
                # a row re-read by its locator (a Ray worker) may hold a path: it stays in the data
                # file's folder (a dataset folder's parent), as when the row was streamed
                root = os.path.dirname(os.path.abspath(self.locator["path"]))
            return self._open_video(root)
        return load_image(self.payload(), root=root, record=self.image_id, max_pixels=max_pixels, **kwargs)

    def _open_video(self, root: str | None) -> Any:
        """A video item's frames (:func:`vlrl.core.video.load_video_value`): a file under the same
        root rule as images (a symlink or path out of the source is refused, never opened), or the
        encoded bytes a manifest row or dataset row holds."""
        from vlrl.core.video import VideoSpec, load_video_value

        spec = VideoSpec(**self.locator["spec"]) if self.locator.get("spec") else None
        return load_video_value(self.payload(), root=root, record=self.image_id, spec=spec)


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

    media = "image"
    video: dict[str, Any] = {}  # noqa: RUF012 - replaced per instance by open_source, never mutated
    """Video sources: how frames are sampled (qwen-vl-utils' keys, :class:`vlrl.core.video.VideoSpec`)."""

    def video_marks(self, describe: bool = False) -> dict[str, Any]:
        """What a video source adds to each locator (``media``, and the sampling ``spec`` any process
        decodes with) and to its description (the job identity): nothing for images."""
        if self.media != "video":
            return {}
        if describe:
            return {"media": "video", **({"video": dict(self.video)} if self.video else {})}
        return {"media": "video", **({"spec": dict(self.video)} if self.video else {})}

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.root}


def bad_locator(reason: str) -> dict[str, Any]:
    """The locator of a record that names no usable image: reading it raises with ``reason``, so the
    job quarantines that one record and goes on."""
    return {"kind": "bad", "reason": reason}


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
