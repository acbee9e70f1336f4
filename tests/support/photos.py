"""Real photographs for tests of the user's path: the sample images scikit-image ships (a dev
dependency), copied into a folder as a user's own photos would sit there."""

from __future__ import annotations

import shutil
from pathlib import Path

PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "cell.png", "camera.png")
"""Colour and grey, wide, tall and square: the scripted models in photo_models tell them apart."""


def photos(folder: Path, names: tuple[str, ...] = PHOTOS) -> Path:
    import skimage.data

    data = Path(skimage.data.__file__).parent
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(data / name, folder / name)
    return folder
