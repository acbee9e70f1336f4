"""``vlrl bench qa-write``: peak memory of writing the curated QA dataset, at 1x and 10x corpus size.

The dataset write of ``vlrl data qa-curate`` used to build a Python list of every kept image's bytes
before handing it to ``datasets`` (peak RSS about 6x the image bytes). It now streams rows to Arrow
a few at a time. This bench measures it: it writes ``images`` random (incompressible) PNGs, runs the
dataset write in a fresh Python process per corpus size (:mod:`vlrl.bench.qa_write_child`), and reports that process's peak resident
memory before and after the write. A streamed write keeps the peak flat when the corpus grows 10x.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def bench_qa_write(images: int = 40, scale: int = 10, side: int = 384, seed: int = 0) -> dict[str, Any]:
    """Peak RSS of the dataset write for ``images`` and ``images * scale`` images of ``side``² noise."""
    import numpy as np
    from PIL import Image

    if images < 1 or scale < 2:
        raise ValueError("need images >= 1 and scale >= 2")
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {"settings": {"images": images, "scale": scale, "side": side}, "runs": []}
    with tempfile.TemporaryDirectory(prefix="vlrl-bench-qa-write-") as tmp:
        sizes: list[int] = []
        for n in (images, images * scale):
            folder = Path(tmp) / f"imgs-{n}"
            folder.mkdir()
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(folder / f"{i:06d}.png")
            image_bytes = sum(f.stat().st_size for f in folder.iterdir())
            image_mb = image_bytes / 2**20
            sizes.append(image_bytes)
            arg = json.dumps({"images": str(folder), "dest": str(Path(tmp) / f"dataset-{n}")})
            proc = subprocess.run([sys.executable, "-m", "vlrl.bench.qa_write_child", arg], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"dataset write of {n} images failed: {proc.stderr.strip().splitlines()[-1:]}")
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            out["runs"].append({
                "images": n,
                "image_mb": round(image_mb, 1),
                "rss_before_write_mb": round(res["rss_before_kb"] / 1024, 1),
                "rss_peak_mb": round(res["rss_peak_kb"] / 1024, 1),
                "write_peak_growth_mb": round((res["rss_peak_kb"] - res["rss_before_kb"]) / 1024, 1),
            })
            for f in folder.iterdir():
                f.unlink()
    small, big = out["runs"]
    out["peak_ratio"] = round(big["rss_peak_mb"] / small["rss_peak_mb"], 3)
    out["corpus_ratio"] = round(sizes[1] / sizes[0], 2)  # from bytes: small images round to 0.0 MB
    return out
