"""Video decoding for captioning and QA: frames sampled and sized by Qwen's video rules, with their times.

A video reaches a Qwen-VL model as a short sequence of frames, chosen and resized by the rules
qwen-vl-utils applies (``fps`` 2 by default, or a fixed ``nframes``; at least 4 and at most 768
frames, an even count; each frame resized to multiples of 28 within a per-frame pixel budget that
also shares ``total_pixels`` across frames). :func:`load_video` applies those same rules, taking
the frame count and the resize budget from qwen-vl-utils itself, so a video captioned here is
the one the model would be trained on, and records each kept frame's time in seconds (timestamped
captions are scored against them).

Decoding goes through PyAV (FFmpeg) one frame at a time; only the sampled frames, already resized,
are kept, so memory per video is bounded by ``nframes`` small frames whatever the video's length
or resolution (qwen-vl-utils' torchvision reader holds every decoded frame first).

A video that cannot be used raises :class:`VideoLoadError` (an
:class:`~vlrl.core.images.ImageLoadError`: every command quarantines it the same way) with a
one-line reason, before any large allocation where the container says enough: an empty or
truncated file, an image under a video name, a file with no video stream (audio only), a codec
FFmpeg cannot decode, a duration over ``max_seconds`` (a 10-hour stream is refused, not decoded),
a frame over ``max_source_pixels``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image

from vlrl.core.images import ImageLoadError, qwen_smart_resize

VIDEO_EXTENSIONS = frozenset({".mp4", ".m4v", ".mov", ".webm", ".mkv", ".avi", ".gif"})

_IMAGE_CONTAINERS = {"image2", "png_pipe", "jpeg_pipe", "webp_pipe", "bmp_pipe", "tiff_pipe", "mjpeg"}
"""FFmpeg demuxers that mean "this is a still image", whatever the file is called (GIF is a video here)."""


class VideoLoadError(ImageLoadError):
    """A video that cannot be used, with its record and a one-line reason (quarantined like an image)."""


@dataclass(frozen=True)
class VideoSpec:
    """How frames are chosen and sized (qwen-vl-utils' keys and defaults), and what is refused."""

    fps: float | None = 2.0
    """Frames per second of video to keep (ignored when ``nframes`` is set)."""
    nframes: int | None = None
    min_frames: int = 4
    max_frames: int = 768
    min_pixels: int | None = None
    """Per-frame pixel budget; default: qwen-vl-utils' (128 to 768 tokens of 28×28)."""
    max_pixels: int | None = None
    total_pixels: int | None = None
    """Pixel budget shared by all frames (qwen-vl-utils: 90% of a 128k-token sequence)."""
    max_seconds: float = 3 * 3600.0
    max_source_pixels: int = 8192 * 8192

    def check(self) -> VideoSpec:
        """Refuse settings no video could be sampled with (``ValueError`` naming the setting)."""
        for name in ("fps", "nframes", "min_pixels", "max_pixels", "total_pixels"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"video {name} must be > 0, got {value}")
        if self.min_frames < 1 or self.max_frames < self.min_frames:
            raise ValueError(f"video frames: need 1 <= min_frames <= max_frames, got {self.min_frames}, {self.max_frames}")
        return self

    def as_element(self) -> dict[str, Any]:
        """The qwen-vl-utils ``{"type": "video", ...}`` keys this spec sets."""
        out: dict[str, Any] = {"nframes": self.nframes} if self.nframes else {"fps": self.fps or 2.0}
        if not self.nframes:
            out.update(min_frames=self.min_frames, max_frames=self.max_frames)
        return out


@dataclass
class Clip:
    """The frames a model sees of one video, and when each was shown."""

    frames: list[Image.Image]
    times: list[float]
    """Presentation time of each kept frame, in seconds from the start."""
    sample_fps: float
    """Frames kept per second of video (what Qwen's processor needs for its temporal positions)."""
    source_fps: float
    duration: float
    total_frames: int
    source_size: tuple[int, int]
    meta: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        """Free the frames (the caption job closes what it decoded, as it closes images)."""
        for f in self.frames:
            f.close()


def iter_video_files(folder: str | os.PathLike[str], *, include_hidden: bool = False):
    """Relative POSIX paths of the video files under ``folder`` (the listing rules of image folders)."""
    from vlrl.core.images import iter_image_files

    return iter_image_files(folder, extensions=VIDEO_EXTENSIONS, include_hidden=include_hidden)


def _budget(spec: VideoSpec, nframes: int) -> tuple[int, int]:
    """Per-frame (min_pixels, max_pixels), as qwen-vl-utils' ``fetch_video`` computes them."""
    from qwen_vl_utils import vision_process as v

    factor = 14 * v.SPATIAL_MERGE_SIZE
    min_pixels = spec.min_pixels or v.VIDEO_MIN_TOKEN_NUM * factor * factor
    total = spec.total_pixels or v.MODEL_SEQ_LEN * factor * factor * 0.9
    cap = max(min(v.VIDEO_MAX_TOKEN_NUM * factor * factor, total / nframes * v.FRAME_FACTOR), int(min_pixels * 1.05))
    max_pixels = min(spec.max_pixels, cap) if spec.max_pixels else cap
    return int(min_pixels), int(max_pixels)


def video_value(value: Any) -> Any:
    """A ``videos``/``video`` cell as one video: a path, encoded bytes, or ``None``.

    Rows name their video as a path, the encoded file (bytes), an HF-style ``{"bytes", "path"}``
    struct, verl's ``{"video": path}``, or a list of any of these (the public RL layout's ``videos``
    column; the first video is the row's)."""
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    if isinstance(value, dict):
        value = value.get("bytes") or value.get("path") or value.get("video")
    if isinstance(value, bytearray):
        value = bytes(value)
    return value


def load_video_value(value: Any, root: str | os.PathLike[str] | None = None, record: object = None,
                     spec: VideoSpec | None = None) -> Clip:
    """Decode a row's video cell (:func:`video_value`) under the images' root policy.

    A path, relative or absolute, must resolve inside ``root`` when one is given (a symlink or a
    path out of the source is refused, never opened); bytes are decoded from memory. Raises
    :class:`VideoLoadError` with a one-line reason."""
    from vlrl.core.images import resolve_under_root

    value = video_value(value)
    record = "<video>" if record is None else record
    if isinstance(value, Clip):
        return value
    if isinstance(value, bytes):
        return load_video(value, spec, record)
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise VideoLoadError(record, f"row names no video (got {type(value).__name__})")
    try:
        real = resolve_under_root(value, root, record) if root is not None else Path(value)
    except ImageLoadError as e:
        raise VideoLoadError(record, e.reason) from None
    return load_video(real, spec, record)


def load_video(path: str | os.PathLike[str] | bytes, spec: VideoSpec | None = None, record: object = None) -> Clip:
    """Decode ``path`` (a file, or the encoded file's bytes) into the frames a Qwen-VL model sees
    (see the module docstring)."""
    import io

    import av
    from qwen_vl_utils import vision_process as v

    spec = spec or VideoSpec()
    data = bytes(path) if isinstance(path, (bytes, bytearray)) else None
    record = ("<video bytes>" if data is not None else str(path)) if record is None else record
    if data is not None:
        if not data:
            raise VideoLoadError(record, "empty file (0 bytes)")
    else:
        p = Path(path)
        try:
            if p.stat().st_size == 0:
                raise VideoLoadError(record, "empty file (0 bytes)")
        except OSError as e:
            raise VideoLoadError(record, f"cannot read: {e.strerror or e}") from None
    try:
        container = av.open(io.BytesIO(data) if data is not None else str(p))
    except (av.error.FFmpegError, UnicodeDecodeError, ValueError) as e:
        raise VideoLoadError(record, f"not a readable video: {getattr(e, 'strerror', None) or e}") from None
    with container:
        fmt = container.format.name
        if container.format.name in _IMAGE_CONTAINERS:
            raise VideoLoadError(record, f"an image, not a video (FFmpeg reads it as {container.format.name})")
        if not container.streams.video:
            kinds = sorted({s.type for s in container.streams}) or ["no streams"]
            raise VideoLoadError(record, f"no video stream (found: {', '.join(kinds)})")
        stream = container.streams.video[0]
        ctx = stream.codec_context
        width, height = int(ctx.width or 0), int(ctx.height or 0)
        if width <= 0 or height <= 0:
            raise VideoLoadError(record, f"the video stream has no frame size (codec {ctx.name!r} undecodable?)")
        if width * height > spec.max_source_pixels:
            raise VideoLoadError(record, f"frames of {width}x{height} exceed max_source_pixels {spec.max_source_pixels}")
        rate = stream.average_rate or stream.guessed_rate or stream.base_rate
        fps = float(rate) if rate else 0.0
        if stream.duration is not None and stream.time_base is not None:
            duration = float(stream.duration * stream.time_base)
        elif container.duration is not None:
            duration = container.duration / 1_000_000
        else:
            duration = 0.0
        if duration > spec.max_seconds:
            raise VideoLoadError(record, f"{duration:.0f} s long, over max_seconds {spec.max_seconds:.0f}")
        total = int(stream.frames or round(duration * fps))
        if total <= 0 or fps <= 0:
            raise VideoLoadError(record, "zero-length video (no frames)")
        try:
            nframes = int(v.smart_nframes(spec.as_element(), total_frames=total, video_fps=fps))
        except (ValueError, AssertionError) as e:
            raise VideoLoadError(record, f"cannot sample frames: {e}") from None
        wanted = sorted({round(i * (total - 1) / max(nframes - 1, 1)) for i in range(nframes)})
        min_pixels, max_pixels = _budget(spec, nframes)
        try:
            h, w = qwen_smart_resize(height, width, factor=28, min_pixels=min_pixels, max_pixels=max_pixels)
        except ValueError as e:
            raise VideoLoadError(record, f"cannot fit the pixel budget: {e}") from None
        frames, times, kept, seen = [], [], [], 0
        targets = iter(wanted)
        nxt = next(targets, None)
        try:
            for k, frame in enumerate(container.decode(stream)):
                seen = k + 1
                if nxt is None:
                    break
                if k == nxt:
                    img = frame.to_image().convert("RGB")
                    frames.append(img.resize((w, h), Image.Resampling.BICUBIC, reducing_gap=3.0))
                    times.append(float(frame.time) if frame.time is not None else k / fps)
                    kept.append(k)
                    nxt = next(targets, None)
        except av.error.FFmpegError as e:
            raise VideoLoadError(record, f"truncated or corrupt stream at frame {seen}: {getattr(e, 'strerror', None) or e}") from None
    if nxt is not None and seen < 0.9 * total:
        raise VideoLoadError(record, f"truncated: the stream ends at frame {seen} of {total}")
    if not frames:
        raise VideoLoadError(record, "no frame could be decoded")
    while len(frames) % v.FRAME_FACTOR or len(frames) < v.FRAME_FACTOR:  # Qwen needs an even frame count
        frames.append(frames[-1])
        times.append(times[-1])
        kept.append(kept[-1])
    sample_fps = len(frames) / max(total, 1) * fps
    meta = {"frames_indices": kept, "size": [w, h], "codec": ctx.name, "format": fmt}
    if data is not None:
        meta["data"] = data  # what an openai: backend sends (a file URL needs a file)
    else:
        meta["path"] = str(p)
    return Clip(frames, times, sample_fps, fps, duration, total, (width, height), meta)


def media_part(obj: Any) -> dict[str, Any]:
    """A loaded image or :class:`Clip` as its chat message part: every job that shows a model "the
    row's media" (captioning, QA writing, the with-media filter, judges) builds its message here."""
    if isinstance(obj, Clip):
        return {"type": "video", "video": obj}
    return {"type": "image", "image": obj}


def frame_seconds(clip: Clip) -> float:
    """Seconds of video between two kept frames (Qwen2.5-VL's ``second_per_grid_ts`` is twice it)."""
    return 1.0 / clip.sample_fps if clip.sample_fps > 0 else math.inf


__all__ = ["VIDEO_EXTENSIONS", "Clip", "VideoLoadError", "VideoSpec", "frame_seconds", "iter_video_files", "load_video",
           "load_video_value", "media_part", "video_value"]
