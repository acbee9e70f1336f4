"""The warm-start cache: every trained tiny model and tokenizer lives in a folder named by a hash of
its settings plus its seed, built once and renamed into place.

Shared by all the demos' models (:mod:`vlrl.demos.shapes.tiny_models`), so two demos, or a demo and a
test, started together agree on one builder per artefact instead of training it twice.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def default_cache_dir() -> Path:
    return Path(os.environ.get("VLRL_CACHE", Path.home() / ".cache" / "vlrl")) / "demo"


def cached(final: Path, build: Callable[[Path], dict[str, Any]]) -> Path:
    """Build into a temp folder next to ``final`` and rename it into place (atomic, race-safe).

    One builder per artefact: two demos started together (or a demo and a test) that need the same
    warm start take a lock on it, and the second waits for the first and reuses its model instead
    of training the same thing again on the same few cores.
    """
    if (final / "warmstart.json").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when the process dies
        return _build_once(final, build)


def _build_once(final: Path, build: Callable[[Path], dict[str, Any]]) -> Path:
    if (final / "warmstart.json").exists():  # another process built it while this one waited
        return final
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    try:
        t0 = time.time()
        info = build(tmp)
        info["seconds"] = round(time.time() - t0, 1)
        (tmp / "warmstart.json").write_text(json.dumps(info, indent=2))
        if final.exists():  # an older incomplete folder (no warmstart.json): replace it
            shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def job_process_setup() -> None:
    """The start of a process that trains one cached model: one torch thread (the models are tiny and
    the cores are shared; a second OpenMP thread spins more than it helps) and timestamped logs."""
    import torch

    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
