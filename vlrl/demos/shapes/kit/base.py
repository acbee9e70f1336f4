"""The demo base: what every ``vlrl demo`` runner does before and around its own stages.

Each runner (CapRL, RubiCap, Vision-R1, the comparison) owns one output folder that must be either
empty, a resumable run of the *same* settings, or a finished one to reuse; it times its stages and
leaves a marker per finished stage so a killed run resumes where it stopped. That contract lives
here once: :class:`DemoSettings` gives a runner's config its fingerprint, :func:`prepare_out`
checks the folder against it, :class:`Stages` keeps the markers and timings, and
:func:`open_run` is the opening every runner starts with.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import atomic_write_json
from vlrl.demos.shapes.kit.cache import default_cache_dir

logger = logging.getLogger(__name__)


class DemoError(RuntimeError):
    """The output folder cannot be used as asked (the message says why and what to do)."""


class DemoSettings:
    """Mixin of the runners' frozen config dataclasses (each has ``seed`` and ``quick``).

    The fingerprint is a hash of :meth:`identity` (all settings by default); a runner overrides
    :meth:`identity` only to keep the fingerprints of folders written before a setting existed.
    Run folders store it, so its value must never change for unchanged settings.
    """

    seed: int
    quick: bool

    def identity(self) -> Any:
        return asdict(self)

    def fingerprint(self) -> str:
        return hashlib.sha1(json.dumps(self.identity(), sort_keys=True, default=str).encode()).hexdigest()[:12]


def hf_spec(path: str | Path, batch_size: int) -> str:
    """The ``hf:`` backend spec every demo loads its tiny models with (CPU, float32)."""
    return f"hf:{path}?device=cpu&dtype=float32&batch_size={batch_size}"


# -- the output folder -------------------------------------------------------------------------


def prepare_out(out: Path, cfg, force: bool) -> dict[str, Any] | None:
    """Check ``out``: returns finished metrics to reuse, or None to (re)start; raises DemoError."""
    marker = out / "demo.json"
    if force and out.exists():
        if any(out.iterdir()) and not marker.exists():
            raise DemoError(f"{out} holds files that are not a vlrl demo run; refusing to delete them even with --force")
        shutil.rmtree(out)
    if out.exists() and any(out.iterdir()):
        if not marker.exists():
            raise DemoError(f"{out} is not empty and is not a vlrl demo folder; choose another --out")
        prev = json.loads(marker.read_text())
        if prev.get("fingerprint") != cfg.fingerprint():
            now = json.loads(json.dumps(asdict(cfg), default=str))
            was = prev.get("config") or {}
            diff = ", ".join(f"{k}: {was.get(k)!r} there, {now.get(k)!r} now" for k in sorted(set(now) | set(was))
                             if was.get(k) != now.get(k) and k not in ("seed", "quick"))
            raise DemoError(
                f"{out} holds a demo run with other settings (seed {prev.get('seed')}, quick={prev.get('quick')}"
                f"{'; ' + diff if diff else ''}); use another --out or pass --force to overwrite it"
            )
        if (out / "metrics.json").exists():
            return json.loads((out / "metrics.json").read_text())
        logger.info("resuming the interrupted demo in %s", out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(marker, {"fingerprint": cfg.fingerprint(), "seed": cfg.seed, "quick": cfg.quick,
                               "config": asdict(cfg)})
    return None


class Stages:
    """Stage markers and per-stage wall time (summed over resumed invocations)."""

    def __init__(self, out: Path) -> None:
        self.dir = out / "state"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.times_path = self.dir / "timings.json"
        self.times: dict[str, float] = json.loads(self.times_path.read_text()) if self.times_path.exists() else {}

    def done(self, name: str) -> bool:
        return (self.dir / f"{name}.done").exists()

    def finish(self, name: str, seconds: float) -> None:
        self.times[name] = round(self.times.get(name, 0.0) + seconds, 2)
        atomic_write_json(self.times_path, self.times)
        (self.dir / f"{name}.done").write_text("ok\n")

    def run(self, name: str, fn: Callable[[], Any]) -> None:
        """Run stage ``name`` unless an earlier invocation finished it; time it and mark it done."""
        if not self.done(name):
            t = time.time()
            fn()
            self.finish(name, time.time() - t)

    def add_time(self, name: str, seconds: float) -> None:
        self.times[name] = round(self.times.get(name, 0.0) + seconds, 2)
        atomic_write_json(self.times_path, self.times)

    def timed(self, name: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, its wall time added to ``name`` (for work redone by every invocation, such as
        looking up or building the cached warm starts); no marker."""
        t = time.time()
        result = fn()
        self.add_time(name, time.time() - t)
        return result


def timing(times: dict[str, float]) -> dict[str, float]:
    """Wall time split into the warm start (cached models: ~0 s when reused) and the run itself,
    each summed over resumed invocations (``times``: :attr:`Stages.times`)."""
    warm = sum(v for k, v in times.items() if k == "warm_start")
    rest = sum(v for k, v in times.items() if k != "warm_start")
    return {"wall_seconds": round(warm + rest, 1), "warm_start_seconds": round(warm, 1), "run_seconds": round(rest, 1)}


# -- the runner opening ------------------------------------------------------------------------


@dataclass
class Run:
    """An opened demo folder: ``reused`` holds a finished run's metrics (then there is nothing to do)."""

    out: Path
    stages: Stages | None
    cache: Path
    reused: dict[str, Any] | None = None


def open_run(out: str | Path, cfg, force: bool, cache_dir: str | Path | None) -> Run:
    """Every runner's opening: check ``out`` against ``cfg`` (:func:`prepare_out`), then its stage
    markers, the warm-start cache (default :func:`default_cache_dir`) and one torch thread.

    One thread: the models are tiny, and on a shared or busy CPU a second OpenMP thread spins far
    more than it helps (GRPO steps were seen going from ~3 s to ~20 s). Models trained in their own
    processes set the same (:func:`~vlrl.demos.shapes.kit.cache.job_process_setup`).
    """
    out = Path(out)
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    prev = prepare_out(out, cfg, force)
    if prev is not None:
        return Run(out, None, cache, reused={**prev, "reused": True})
    import torch

    torch.set_num_threads(1)
    return Run(out, Stages(out), cache)
