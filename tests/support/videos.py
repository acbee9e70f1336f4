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
