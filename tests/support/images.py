"""Folders of small distinct PNGs for tests that only need images to exist and differ."""

from __future__ import annotations

from pathlib import Path

from PIL import Image


def make_images(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.new("RGB", (32, 32), (10 * i, 0, 0)).save(folder / f"img{i}.png")
    return folder
