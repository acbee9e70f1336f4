"""``vlrl bench caption``: batched ``vlrl caption`` against one-image-at-a-time ``generate``.

Two questions, one run:

* **Throughput.** The same tiny VLM captions the same images with the same greedy settings, once
  through ``vlrl caption`` (decoding on loader threads, left-padded batched ``generate``, exactly-once
  output, response cache) and once by a plain loop that calls ``model.generate`` for one image at a
  time with no vlrl code at all — the loop people write first (:mod:`vlrl.bench.caption_single`). Both run in fresh subprocesses with
  the same thread settings; both timings exclude model loading (``vlrl caption`` reports it
  apart, as ``model_load_seconds``).
* **Memory does not grow with the corpus.** ``vlrl caption`` runs again on a corpus ten times larger;
  its peak RSS (``getrusage`` in the child, reported in ``manifest.json``) must stay within 10% of
  the small run's, because the source and the output are streamed.

``media="video"`` (``vlrl bench caption --videos``) asks both questions for video: generated clips
(a coloured square crossing the frame, 2 s at 8 fps) captioned by ``vlrl caption --videos``
against a plain loop that decodes each clip with PyAV, samples and sizes its frames by
qwen-vl-utils' rules (its own functions, as its ``fetch_video`` would if its reader worked here) and
calls ``generate`` once per video. Both sides report their prompt tokens per video, so the ratio
compares the same work.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

def make_corpus(root: Path, n: int, size: int = 56, seed: int = 0) -> list[str]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        p = root / f"{i:05d}.png"
        Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(p)
        paths.append(str(p))
    return paths


def make_video_corpus(root: Path, n: int, size: int = 64, seed: int = 0) -> list[str]:
    """``n`` clips of a coloured square crossing a white frame (H.264 in MP4, 2 s at 8 fps)."""
    import av
    import numpy as np

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    side = size // 4
    for i in range(n):
        p = root / f"{i:05d}.mp4"
        colour, y = rng.integers(0, 200, 3).astype(np.uint8), int(rng.integers(0, size - side))
        with av.open(str(p), "w") as out:
            stream = out.add_stream("libx264", rate=8)
            stream.width = stream.height = size
            stream.pix_fmt = "yuv420p"
            for k in range(16):
                arr = np.full((size, size, 3), 255, dtype=np.uint8)
                x = k * (size - side) // 15
                arr[y : y + side, x : x + side] = colour
                for packet in stream.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")):
                    out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
        paths.append(str(p))
    return paths


def _env(threads: int | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def run_vlrl_caption(model: Path, images: Path, out: Path, batch_size: int, max_tokens: int, threads: int | None = None,
                     media: str = "image") -> dict[str, Any]:
    """Run ``vlrl caption`` in a fresh process; returns its manifest's ``this_run`` block (with the
    mean prompt tokens per item added as ``prompt_tokens``)."""
    exe = Path(sys.executable).parent / "vlrl"
    cmd = [str(exe) if exe.exists() else sys.executable, *([] if exe.exists() else ["-c", "from vlrl.cli import main; main()"])]
    cmd += ["caption", f"--{media}s", str(images), "--model", f"hf:{model}", "--out", str(out),
            "--batch-size", str(batch_size), "--max-tokens", str(max_tokens), "--no-progress"]
    res = subprocess.run(cmd, env=_env(threads), capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"vlrl caption failed:\n{res.stderr[-3000:]}")
    this_run = json.loads((out / "manifest.json").read_text())["this_run"]
    tokens = [json.loads(line)["prompt_tokens"] for f in sorted((out / "captions").glob("*.jsonl"))
              for line in f.read_text().splitlines() if line.strip()]
    return {**this_run, "prompt_tokens": sum(tokens) / len(tokens) if tokens else None}


def run_single(model: Path, images: list[str], max_tokens: int, prompt: str, threads: int | None = None,
               media: str = "image") -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "single.json"
        res = subprocess.run(
            [sys.executable, "-m", "vlrl.bench.caption_single", str(model), json.dumps(images), str(max_tokens), prompt, str(result),
             media],
            env=_env(threads), capture_output=True, text=True,
        )
        if res.returncode != 0 or not result.exists():
            raise RuntimeError(f"single-image baseline failed:\n{res.stderr[-3000:]}")
        return json.loads(result.read_text())


def bench_caption(
    model: str | Path | None = None,
    n_images: int = 64,
    batch_size: int = 32,
    max_tokens: int = 32,
    large_factor: int = 10,
    workdir: str | Path | None = None,
    threads: int | None = None,
    media: str = "image",
) -> dict[str, float]:
    """Run the comparison; returns the numbers ``vlrl bench caption`` writes (``media="video"``:
    videos, and each side's prompt tokens per video).

    ``threads`` sets ``OMP_NUM_THREADS`` for both sides (default: inherit the environment). On a
    shared 2-core machine, 1 avoids oversubscription that slows *both* sides by an order of magnitude.
    """
    for name, v in (("n_images", n_images), ("batch_size", batch_size), ("max_tokens", max_tokens), ("large_factor", large_factor)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if model is not None and not Path(model).is_dir():
        raise ValueError(f"model {model}: no such model folder")
    from vlrl.captioning.job import DEFAULT_PROMPT_FILE, PromptRenderer
    from vlrl.core.prompts import template_path
    from vlrl.core.sources import ImageItem

    video = media == "video"
    corpus = make_video_corpus if video else make_corpus

    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        tmp = Path(tmp)
        if model is None:
            from vlrl.core.tiny import make_tiny

            model = make_tiny("qwen2_5_vl", tmp / "tiny_vlm", seed=0)
        model = Path(model)
        small = corpus(tmp / "small", n_images)
        corpus(tmp / "large", n_images * large_factor, seed=1)
        prompt_file = template_path("caption_video") if video else DEFAULT_PROMPT_FILE
        prompt = PromptRenderer(prompt_file.read_text())(ImageItem("x", {}))

        logger.info("batched: vlrl caption on %d %ss", n_images, media)
        batched_run = run_vlrl_caption(model, tmp / "small", tmp / "out_small", batch_size, max_tokens, threads, media)
        logger.info("single: plain generate, one %s at a time, on the same %d", media, n_images)
        single = run_single(model, small, max_tokens, prompt, threads, media)
        logger.info("memory: vlrl caption on %d %ss", n_images * large_factor, media)
        large_run = run_vlrl_caption(model, tmp / "large", tmp / "out_large", batch_size, max_tokens, threads, media)

    batched_ips = batched_run["images_per_s"]
    single_ips = single["images"] / single["seconds"]
    out = {
        "batched_images_per_s": round(batched_ips, 3),
        "single_images_per_s": round(single_ips, 3),
        "speedup": round(batched_ips / single_ips, 2),
        "peak_rss_mb_small": batched_run["peak_rss_mb"],
        "peak_rss_mb_large": large_run["peak_rss_mb"],
    }
    if video:  # the same work on both sides: prompt tokens per video (frames × patches + text)
        out.update(media="video", batched_prompt_tokens=batched_run["prompt_tokens"], single_prompt_tokens=single.get("prompt_tokens"))
    return out
