"""Real video files made on the spot with FFmpeg (PyAV): the inputs of every video test."""

from __future__ import annotations

import numpy as np


def make_video(path, *, seconds=3.0, fps=10, size=(64, 48), codec="libx264", container=None, options=None):
    import av

    w, h = size
    with av.open(str(path), "w", format=container, options=options or {}) as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height = w, h
        stream.pix_fmt = "yuv420p"
        for k in range(int(seconds * fps)):
            arr = np.zeros((h, w, 3), dtype=np.uint8)
            arr[:, : max(1, (k * w) // int(seconds * fps))] = (200, 30, 30)  # a bar that grows: frames differ
            for packet in stream.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def make_motion_video(path, direction="right", *, seconds=2.0, fps=8, size=(96, 64), codec="libx264"):
    """A red square crossing a white frame from one side to the other (``right`` or ``left``): which
    way it moves is known by construction, and no single frame tells it."""
    import av

    w, h = size
    n, side = int(seconds * fps), h // 3
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for k in range(n):
            x = round(k * (w - side) / max(n - 1, 1))
            x = x if direction == "right" else w - side - x
            arr = np.full((h, w, 3), 255, dtype=np.uint8)
            arr[side : 2 * side, x : x + side] = (220, 20, 20)
            for packet in stream.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def motion_of(clip) -> str:
    """Which way the red square of a :func:`make_motion_video` clip moves, read from its first and
    last kept frames (what a model that watches the video can tell)."""

    def centre(frame):
        arr = np.asarray(frame).astype(int)
        cols = np.nonzero(((arr[:, :, 0] > 150) & (arr[:, :, 1] < 100)).any(axis=0))[0]
        return cols.mean()

    return "right" if centre(clip.frames[-1]) > centre(clip.frames[0]) else "left"
