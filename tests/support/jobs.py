"""What the long-job tests share: an environment for child ``vlrl`` processes and a small image corpus."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image

from tests.support.paths import ROOT


def child_env(**extra: str) -> dict[str, str]:
    root = str(ROOT)
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    env.update(extra)
    return env


def corpus(root: Path, n: int, broken: int = 0) -> Path:
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (12, 16, 3), dtype=np.uint8)).save(root / f"{i:03d}.png")
    for i in range(broken):
        (root / f"zz-broken{i}.png").write_bytes(b"<html>not an image</html>")
    return root
