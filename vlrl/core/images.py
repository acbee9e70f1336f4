"""The one image loader: every vlrl module that needs pixels goes through :func:`load_image`.

Why one loader: an image corpus scraped from the web or assembled from several datasets holds every
kind of file a decoder can meet — phone photos stored sideways with an EXIF orientation tag, CMYK
print JPEGs, palette PNGs with a transparent index, 16-bit scans, files cut short by a failed copy,
HTML error pages saved as ``.jpg``, and now and then a decompression bomb. If the captioner, the QA
curator, the training adapter and the evaluator each opened images their own way, the same file
would give different pixels in training and evaluation, or crash one stage hours into a run. So
there is exactly one function, and it either returns a clean RGB image or raises
:class:`ImageLoadError` with a one-line reason that batch jobs write to their quarantine.

What it does, in order:

1. **Refuse paths outside the dataset root.** With ``root`` set, the path is resolved (``..`` and
   symlinks included) and must land inside the resolved root. A metadata file that says
   ``../../etc/shadow`` or a symlink planted in an image folder cannot make a job read elsewhere.
2. **Check the declared size before decoding.** PIL opens lazily: ``Image.open`` reads only the
   header, so ``width × height`` is known before a single pixel is inflated. A small file that
   declares a huge canvas is refused there. The limit is a per-call argument, defaulting to the
   one a command set with :func:`image_limits` (its ``--max-image-pixels`` flag); only that
   context raises the process-wide ``PIL.Image.MAX_IMAGE_PIXELS`` with it (PIL's own hard ceiling
   at twice that value otherwise still applies and is reported the same way).
3. **Force a full decode** (``img.load()``) so truncated files fail here, not later inside a
   processor. ``ImageFile.LOAD_TRUNCATED_IMAGES`` is never set; if something else in the process
   set it, a warning says truncated files will slip through.
4. **Apply EXIF orientation**, then **convert to RGB**: alpha (RGBA, LA, palette with transparency)
   is composited on white — what a viewer shows and what a captioner should see, rather than the
   arbitrary colours hidden under transparent pixels; 16-bit and 32-bit integer images are scaled
   to 8 bits instead of clipped (a plain ``convert`` turns most 16-bit scans white); CMYK,
   grayscale and bilevel go through PIL's conversions.
5. **Optionally fit Qwen's pixel budget** (``min_pixels``/``max_pixels``) with qwen-vl-utils'
   ``smart_resize``, so both sides are multiples of the patch factor (28 for Qwen2/2.5-VL) and the
   model sees exactly the resolution its processor would produce.
"""

from __future__ import annotations

import io
import logging
import math
import os
import warnings
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

logger = logging.getLogger(__name__)

DEFAULT_MAX_PIXELS_LIMIT = 89_478_485
"""Refuse images that declare more pixels than this (PIL's own default warning threshold)."""

QWEN_FACTOR = 28
"""Patch size × spatial merge for Qwen2-VL and Qwen2.5-VL (14 × 2)."""

MAX_ASPECT_RATIO = 200
"""The longest side over the shortest that Qwen's (and qwen-vl-utils') processors accept."""

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".jfif", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"})

_ALPHA_MODES = {"RGBA", "RGBa", "LA", "La", "PA"}
_REFUSED_FORMATS = {"EPS"}
_WIDE_INT_MODES = {"I", "I;16", "I;16L", "I;16B", "I;16N"}


class ImageLoadError(ValueError):
    """An image that cannot be used, with the record it belongs to and a one-line reason."""

    def __init__(self, record: object, reason: str) -> None:
        self.record = str(record)
        self.reason = " ".join(str(reason).split())  # one line, whatever the decoder said
        super().__init__(f"{self.record}: {self.reason}")


def resolve_under_root(path: str | os.PathLike[str], root: str | os.PathLike[str], record: object = None) -> Path:
    """Resolve ``path`` (relative to ``root`` unless absolute) and refuse it if it leaves ``root``.

    Symlinks and ``..`` are resolved first, so a link inside the folder that points outside it is
    refused just like ``../x.png``.
    """
    record = path if record is None else record
    root_real = Path(root).resolve()
    p = Path(path)
    real = (p if p.is_absolute() else root_real / p).resolve()
    if not real.is_relative_to(root_real):
        raise ImageLoadError(record, f"path escapes the dataset root {str(root)!r} (resolves to {str(real)!r})")
    return real


class _FromSettings:
    """Marks "use the process-wide limit set by :func:`image_limits`" (``None`` means no limit)."""

    def __repr__(self) -> str:
        return "<image_limits default>"


FROM_SETTINGS: Any = _FromSettings()
_SETTINGS: dict[str, int | None] = {"max_image_pixels": DEFAULT_MAX_PIXELS_LIMIT, "resize_max_pixels": None}


@contextmanager
def image_limits(max_image_pixels: int | None | _FromSettings = FROM_SETTINGS,
                 resize_max_pixels: int | None = None) -> Iterator[None]:
    """Set the decompression-bomb limit and the Qwen resize budget for every :func:`load_image` call inside.

    Commands open images in many places (item loaders, record readers, judges that show the
    image); this is the one place their ``--max-image-pixels`` / ``--resize-max-pixels`` flags
    reach all of them. Process-wide rather than a context variable because loaders run in thread
    pools. ``max_image_pixels``: ``FROM_SETTINGS`` keeps the current limit, ``0``/``None`` lifts it.
    PIL's own ceiling (twice ``Image.MAX_IMAGE_PIXELS``) is raised with it, so a limit set
    explicitly above PIL's default is the one that applies. A call passing its own values wins.
    """
    old, old_pil = dict(_SETTINGS), Image.MAX_IMAGE_PIXELS
    if not isinstance(max_image_pixels, _FromSettings):
        limit = max_image_pixels or None
        _SETTINGS["max_image_pixels"] = limit
        Image.MAX_IMAGE_PIXELS = None if limit is None else max(limit, DEFAULT_MAX_PIXELS_LIMIT)
    if resize_max_pixels is not None:
        _SETTINGS["resize_max_pixels"] = resize_max_pixels
    try:
        yield
    finally:
        _SETTINGS.update(old)
        Image.MAX_IMAGE_PIXELS = old_pil


def image_limits_of(params: dict[str, Any]) -> AbstractContextManager[None]:
    """The :func:`image_limits` a command's parameters ask for: its ``max_image_pixels`` and
    ``resize_max_pixels`` (unset ones keep the defaults)."""
    limit = params.get("max_image_pixels")
    return image_limits(FROM_SETTINGS if limit is None else limit, params.get("resize_max_pixels"))


def load_image(
    src: Any,
    *,
    root: str | os.PathLike[str] | None = None,
    max_pixels_limit: int | None = FROM_SETTINGS,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    factor: int = QWEN_FACTOR,
    record: object = None,
) -> Image.Image:
    """Load ``src`` as a fully decoded RGB ``PIL.Image`` or raise :class:`ImageLoadError`.

    Args:
        src: a path (``str``/``Path``), encoded ``bytes``, a ``PIL.Image``, or an HF ``Image``
            feature value ``{"bytes": ..., "path": ...}`` (bytes win when both are present).
        root: dataset root; relative paths resolve against it and no path may escape it.
            ``None`` means relative to the working directory with no containment check.
        max_pixels_limit: refuse images declaring more than this many pixels (``None``: no limit
            beyond PIL's own hard ceiling; default: the :func:`image_limits` in force, else
            ``DEFAULT_MAX_PIXELS_LIMIT``).
        min_pixels, max_pixels: Qwen pixel budget; when either is set the image is resized with
            ``smart_resize`` (the unset one takes qwen-vl-utils' default). With neither set, the
            resize budget of the :func:`image_limits` in force applies (none by default).
        factor: the budget's size multiple (28 for Qwen2/2.5-VL).
        record: the name used in errors (defaults to the path, or ``<bytes>``/``<PIL image>``).
    """
    if isinstance(max_pixels_limit, _FromSettings):
        max_pixels_limit = _SETTINGS["max_image_pixels"]
    if min_pixels is None and max_pixels is None:
        max_pixels = _SETTINGS["resize_max_pixels"]
    if min_pixels is not None and max_pixels is not None and max_pixels < min_pixels:
        raise ValueError(f"max_pixels ({max_pixels}) must be >= min_pixels ({min_pixels})")
    if isinstance(src, dict):
        data, path = src.get("bytes"), src.get("path")
        if isinstance(data, str):  # {"bytes": "<a path>"} is a path: it gets the root check below, like any path
            data, path = None, data
        src = data if data else path
        if record is None and path:
            record = path
        if src is None:
            raise ImageLoadError(record or "<image>", "image feature has neither bytes nor path")

    if src is None or (isinstance(src, str) and not src):
        raise ImageLoadError(record or "<image>", "no image (empty value)")
    if isinstance(src, Image.Image):
        img = _decode_opened(src, record or "<PIL image>", max_pixels_limit)
    elif isinstance(src, (bytes, bytearray, memoryview)):
        img = _decode_stream(io.BytesIO(bytes(src)), record or "<bytes>", max_pixels_limit)
    elif isinstance(src, (str, os.PathLike)):
        record = src if record is None else record
        path = resolve_under_root(src, root, record) if root is not None else Path(src)
        if not path.exists():
            raise ImageLoadError(record, "file not found")
        if not path.is_file():
            raise ImageLoadError(record, "not a regular file")
        if path.stat().st_size == 0:
            raise ImageLoadError(record, "empty file (0 bytes)")
        try:
            with open(path, "rb") as fh:
                img = _decode_stream(fh, record, max_pixels_limit)
        except OSError as e:  # open() itself: permissions, I/O errors
            raise ImageLoadError(record, f"cannot read file ({e.strerror or e})") from None
    else:
        raise ImageLoadError(record or "<image>", f"unsupported image source type {type(src).__name__}")

    img = _exif_transpose(img, record)
    img = to_rgb(img, record)
    ratio = max(img.size) / max(1, min(img.size))
    if ratio > MAX_ASPECT_RATIO:
        # the vision processors refuse it per request, which a job would count as a backend failure,
        # retry on every run and let trip the circuit breaker: it is this image's problem
        raise ImageLoadError(record, f"aspect ratio {ratio:.0f}:1 is over {MAX_ASPECT_RATIO}:1 "
                                     f"({img.width}×{img.height}); vision-language processors refuse it")
    if min_pixels is not None or max_pixels is not None:
        img = fit_pixel_budget(img, min_pixels=min_pixels, max_pixels=max_pixels, factor=factor, record=record)
    return img


def image_part(value: Any) -> dict[str, Any] | None:
    """A dataset's image cell as a chat message part (``{"type": "image", "image": PIL}``), or None.

    Judges that may be shown the image (the rubric judge, the Likert judge) receive the column as a
    trainer passes it: a path, bytes, a decoded image, a ``{"path"|"bytes"}`` dict, or a list whose
    first item is the image.
    """
    if isinstance(value, list):
        value = value[0] if value else None
    if isinstance(value, dict):
        value = value.get("path") or value.get("bytes")
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        value = load_image(value)
    return {"type": "image", "image": value}


def _decode_stream(fp: Any, record: object, limit: int | None) -> Image.Image:
    with warnings.catch_warnings():
        # We enforce our own limit below; PIL's warning for sizes between its two thresholds is noise.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            img = Image.open(fp)
        except Image.DecompressionBombError as e:
            raise ImageLoadError(record, f"decompression bomb refused by PIL ({e}; raise the limit with --max-image-pixels)") from None
        except UnidentifiedImageError:
            raise ImageLoadError(record, "not an image (no decoder recognises the file)") from None
        except Exception as e:  # noqa: BLE001 - hostile headers raise all sorts of things
            raise ImageLoadError(record, f"corrupt image header ({type(e).__name__}: {e})") from None
        return _decode_opened(img, record, limit)


def _decode_opened(img: Image.Image, record: object, limit: int | None) -> Image.Image:
    """Check the declared size, then force a full decode."""
    if img.format in _REFUSED_FORMATS:
        # PIL renders EPS by running Ghostscript on the file: never on untrusted input.
        raise ImageLoadError(record, f"{img.format} (PostScript) files are refused: decoding runs an external interpreter")
    w, h = img.size
    if w <= 0 or h <= 0:
        raise ImageLoadError(record, f"invalid image size {w}x{h}")
    if limit is not None and w * h > limit:
        raise ImageLoadError(record, f"decompression bomb: {w}x{h} = {w * h} pixels exceeds the limit of {limit} "
                             f"(raise it with --max-image-pixels {w * h} if the image is legitimate)")
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        _warn_truncated_allowed()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            img.load()
        except Image.DecompressionBombError as e:
            raise ImageLoadError(record, f"decompression bomb refused by PIL ({e}; raise the limit with --max-image-pixels)") from None
        except Exception as e:  # noqa: BLE001 - any decoder failure is a bad file, never a crash
            msg = str(e)
            if "truncated" in msg.lower() or isinstance(e, EOFError):
                raise ImageLoadError(record, f"truncated file ({msg or type(e).__name__})") from None
            raise ImageLoadError(record, f"corrupt image data ({type(e).__name__}: {msg})") from None
    return img


@lru_cache(maxsize=1)
def _warn_truncated_allowed() -> None:
    logger.warning("PIL.ImageFile.LOAD_TRUNCATED_IMAGES is True in this process: truncated images will not be refused")


def _exif_transpose(img: Image.Image, record: object) -> Image.Image:
    try:
        if img.getexif().get(0x0112, 1) in (None, 1):  # no rotation: skip exif_transpose's full copy
            return img
        out = ImageOps.exif_transpose(img)
    except Exception as e:  # noqa: BLE001 - a broken EXIF block should not cost us the image
        logger.warning("%s: ignoring unreadable EXIF orientation (%s)", record, e)
        return img
    return img if out is None else out


def to_rgb(img: Image.Image, record: object = "<image>") -> Image.Image:
    """Convert any PIL mode to RGB: alpha on white, wide integers scaled, CMYK/gray via PIL."""
    mode = img.mode
    if mode == "RGB":
        return img
    try:
        if mode == "P":
            has_alpha = "transparency" in img.info or img.palette is not None and img.palette.mode == "RGBA"
            img, mode = (img.convert("RGBA"), "RGBA") if has_alpha else (img.convert("RGB"), "RGB")
            if mode == "RGB":
                return img
        if mode in _ALPHA_MODES:
            rgba = img.convert("RGBA")
            white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
            return Image.alpha_composite(white, rgba).convert("RGB")
        if mode in _WIDE_INT_MODES or mode == "F":
            return Image.fromarray(_to_uint8(np.asarray(img), mode)).convert("RGB")
        return img.convert("RGB")
    except Exception as e:  # noqa: BLE001
        raise ImageLoadError(record, f"cannot convert colour mode {mode} to RGB ({e})") from None


def _to_uint8(arr: np.ndarray, mode: str) -> np.ndarray:
    """Scale one-channel 16-bit / 32-bit / float pixels to 0..255 (a plain convert would clip)."""
    if mode.startswith("I;16"):
        return ((arr.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
    a = arr.astype(np.float64)
    if mode == "F" and a.size and np.nanmax(a) <= 1.0:
        a = a * 255.0  # float images in [0, 1]
    elif a.size and np.nanmax(a) > 255:
        a = np.clip(a, 0, 65535) * (255.0 / 65535.0)  # "I" holding 16-bit data (older PNG decoding)
    return np.clip(np.nan_to_num(a), 0, 255).round().astype(np.uint8)


def qwen_smart_resize(
    height: int, width: int, *, factor: int = QWEN_FACTOR, min_pixels: int | None = None, max_pixels: int | None = None
) -> tuple[int, int]:
    """``(height, width)`` after Qwen's resize rules, from qwen-vl-utils when it imports.

    qwen-vl-utils imports torch and torchvision at module level; where they are missing the same
    rules (round to the factor, then scale into [min_pixels, max_pixels] keeping the aspect ratio)
    are applied here so the loader still works on a slim install.
    """
    # Only one bound given: the other takes qwen-vl-utils' default, moved so the budget is not empty
    # (qwen-vl-utils asserts max >= min, so max_pixels=784 alone would otherwise crash).
    if max_pixels is not None and min_pixels is None:
        min_pixels = min(4 * factor * factor, max_pixels)
    elif min_pixels is not None and max_pixels is None:
        max_pixels = max(16384 * factor * factor, min_pixels)
    if min_pixels is not None and max_pixels is not None and max_pixels < min_pixels:
        raise ValueError(f"max_pixels ({max_pixels}) must be >= min_pixels ({min_pixels})")
    fn = _qwen_smart_resize_fn()
    if fn is not None:
        h, w = fn(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
        return max(factor, h), max(factor, w)  # a budget under ~factor² floors a side to 0
    max_pixels = 16384 * factor * factor if max_pixels is None else max_pixels
    min_pixels = 4 * factor * factor if min_pixels is None else min_pixels
    if max(height, width) / min(height, width) > 200:
        raise ValueError(
            f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}"
        )
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h, w = math.floor(height / beta / factor) * factor, math.floor(width / beta / factor) * factor
        h, w = max(factor, h), max(factor, w)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h, w


@lru_cache(maxsize=1)
def _qwen_smart_resize_fn() -> Any:
    try:
        from qwen_vl_utils import smart_resize
    except Exception as e:  # noqa: BLE001 - ImportError, or torchvision failing inside it
        logger.info("qwen-vl-utils unavailable (%s); using vlrl's copy of its resize rules", e)
        return None
    return smart_resize


def fit_pixel_budget(
    img: Image.Image,
    *,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    factor: int = QWEN_FACTOR,
    record: object = "<image>",
) -> Image.Image:
    """Resize so both sides are multiples of ``factor`` and the area lies in the budget."""
    try:
        h, w = qwen_smart_resize(img.height, img.width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
    except ValueError as e:  # extreme aspect ratio
        raise ImageLoadError(record, f"cannot fit the pixel budget: {e}") from None
    if (w, h) == img.size:
        return img
    # reducing_gap: shrink by an integer factor with a box filter first, then resample; a 12000×12000
    # scan fits a Qwen budget in under a second instead of ~15 s, with no visible difference.
    return img.resize((w, h), Image.Resampling.BICUBIC, reducing_gap=3.0)


def iter_image_files(
    folder: str | os.PathLike[str],
    *,
    extensions: Iterable[str] = IMAGE_EXTENSIONS,
    include_hidden: bool = False,
) -> Iterator[str]:
    """Relative POSIX paths of image files under ``folder``, recursive, sorted, by extension.

    The relative path is the image's id throughout vlrl. Symlinked *directories* are not followed
    (a cycle or a link to ``/`` would never end); symlinked files are listed and the loader decides
    whether they stay inside the root. Hidden files and folders (``.DS_Store``, ``._x.jpg``,
    ``.cache/``) are skipped unless ``include_hidden``.
    """
    exts = {e.lower() if e.startswith(".") else f".{e.lower()}" for e in extensions}
    base = Path(folder)
    if not base.is_dir():
        raise NotADirectoryError(f"{folder}: not a directory")
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        if not include_hidden:
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel_dir = Path(dirpath).relative_to(base)
        for name in filenames:
            if (include_hidden or not name.startswith(".")) and Path(name).suffix.lower() in exts:
                found.append((rel_dir / name).as_posix())
    yield from sorted(found)


def check_images(
    items: Iterable[tuple[str, Any]],
    *,
    root: str | os.PathLike[str] | None = None,
    max_pixels_limit: int | None = DEFAULT_MAX_PIXELS_LIMIT,
    total: int | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the loader over ``(label, src)`` pairs; never raises on a bad image.

    Returns ``{"files": [{"path", "status", "reason"}], "ok": N, "errors": M}``.
    """
    from tqdm.auto import tqdm

    files: list[dict[str, Any]] = []
    n_ok = 0
    for label, src in tqdm(items, total=total, desc="checking images", unit="img", disable=not progress):
        try:
            img = load_image(src, root=root, max_pixels_limit=max_pixels_limit, record=label)
            img.close()
        except ImageLoadError as e:
            files.append({"path": label, "status": "error", "reason": e.reason})
        except Exception as e:  # noqa: BLE001 - a check must report, not crash
            files.append({"path": label, "status": "error", "reason": f"{type(e).__name__}: {e}"})
        else:
            files.append({"path": label, "status": "ok", "reason": None})
            n_ok += 1
    return {"files": files, "ok": n_ok, "errors": len(files) - n_ok}
