"""What one caption run writes, and the manifest that reports it: :class:`Sink`.

Kept apart from the job loop (:mod:`vlrl.captioning.job`) because two engines share it: the local
loop and the Ray driver (:mod:`vlrl.captioning.ray_engine`) commit through the same ``Sink``, so the
folder layout, the exactly-once store and the manifest's numbers are the same whichever ran.

The manifest counts empty (whitespace-only) and truncated (``finish_reason == "length"``)
captions, for this run and for the folder (the records on disk when the run started, counted by
the store as it indexes them, plus this run's: exact after a ``kill -9`` too), and warns once when
too many are (:mod:`vlrl.core.outputs`).

The manifest's ``this_run.images_per_s`` is throughput: the seconds spent loading the model
(``model_load_seconds``, loaded lazily once the first good image arrives) are reported on their own
and left out of it, so a small run is not mostly a measure of ``from_pretrained``.
"""

from __future__ import annotations

import logging
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from vlrl.captioning.store import CaptionStore, write_dataset_card
from vlrl.core.backends import parse_spec, spec_identity
from vlrl.core.identity import read_identity, resolve_source
from vlrl.core.jobs import Job
from vlrl.core.jobs import retry_quarantined as _retry_quarantined
from vlrl.core.outputs import OutputCounts
from vlrl.core.pipeline import Quarantine, atomic_write_json
from vlrl.core.progress import Credit, on_requests
from vlrl.core.sources import ImageSource

CaptionJob = Any  # vlrl.captioning.job.CaptionJob, which imports this module (named, not imported)
logger = logging.getLogger(__name__)
FAILURES_KEPT = 20
"""How many of a run's backend failures the manifest names with their reasons (all are counted)."""


def model_name(spec: str) -> str:
    """What a spec names, without where it is served (so one vLLM per GPU counts as one model), with
    the options that can change captions (``?dtype=``, a ``py:`` factory's options; not concurrency
    or timeouts, see :func:`vlrl.core.backends.spec_identity`): ``MODEL[?key=value&...]``."""
    kind, target, _ = parse_spec(spec)
    name = target.rsplit("@", 1)[-1] if kind == "openai" else str(Path(target).resolve()) if Path(target).exists() else target
    _, sep, options = spec_identity(spec).partition("?")
    return name + sep + options


def fingerprint(job: CaptionJob, source: ImageSource) -> dict[str, Any]:
    """What must not change between a job and its rerun into the same folder: the job's identity
    (:mod:`vlrl.core.identity`), kept in the manifest's ``job`` block."""
    desc = dict(source.describe())
    if "path" in desc:
        desc["path"] = resolve_source(desc["path"])
    return {
        "source": desc,
        "model": sorted({model_name(s) for s in job.models}),
        "prompt": job.prompt_text(),
        "sampling": job.sampling().to_dict(),
        "format": job.output_format,
        "shard": list(job.shard_tuple),
        "max_pixels": job.max_pixels,
    }


def stored_identity(path: Path) -> dict[str, Any] | None:
    """The ``job`` block of an existing manifest (None when there is none or it is unreadable)."""
    return read_identity(path, "job")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Sink:
    """Everything the job writes: caption parts, quarantine, manifest, progress bar. One writer."""

    def __init__(self, job: CaptionJob, source: ImageSource) -> None:
        self.job = job
        names = job.names()
        job.out.mkdir(parents=True, exist_ok=True)
        self.manifest_path = job.out / names["manifest"]
        self.fp = fingerprint(job, source)
        # one writer per folder and shard; the identity lives in the manifest's "job" block
        self.guard = Job(
            "caption", job.out, self.fp, shard=job.shard_tuple, force=job.force,
            outputs=[names["manifest"], names["quarantine"], f"captions/{names['prefix']}-*", f"captions/.{names['prefix']}-*"],
            has_work=lambda: self._has_work(names), stored=stored_identity(self.manifest_path),
            max_consecutive_failures=job.max_consecutive_failures,
        ).__enter__()
        try:
            if job.retry_quarantined:
                _retry_quarantined(job.out / names["quarantine"])
            self.store = CaptionStore(job.out / "captions", prefix=names["prefix"], fmt=job.output_format, max_records=job.part_size)
            self.quarantine = Quarantine(job.out / names["quarantine"], key_field="image_id")
        except BaseException:
            self.guard.__exit__(None, None, None)
            raise
        self.source = source
        self.started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.t0 = time.perf_counter()
        self.loop_t0: float | None = None
        self.model_load_seconds = 0.0
        """Seconds spent opening backends during the loop: reported, and kept out of ``images_per_s``."""
        self.new = self.new_quarantined = self.failed = 0
        self.failures: dict[str, str] = {}  # the first FAILURES_KEPT of this run, for the manifest
        self.models: set[str] = set()
        self._last_manifest = 0.0
        self.bar = None
        self._prepaid = 0  # captions the bar showed while in flight, not yet committed
        self._closed: dict[str, Any] | None = None
        self.started_work = self.manifest_path.exists() and (len(self.store) + len(self.quarantine)) > 0
        # empty and truncated captions: this run's, and the folder's counted from its records on disk
        self.health = OutputCounts("captions", f"--max-tokens (now {job.max_tokens})")
        self.health_before = dict(self.store.existing)
        if self.started_work:
            self.write_manifest("running")

    def _has_work(self, names: dict[str, str]) -> bool:
        folder = self.job.out / "captions"
        if any(p.stat().st_size > 0 for p in folder.glob(f"{names['prefix']}-*")) if folder.is_dir() else False:
            return True
        q = self.job.out / names["quarantine"]
        return q.is_file() and q.stat().st_size > 0

    def _start_work(self) -> None:
        """The first committed record: only now is the job's identity written (a failed first run leaves none)."""
        if not self.started_work:
            self.started_work = True
            write_dataset_card(self.job.out, self.job.output_format)
            self.guard.started()
            self.write_manifest("running")

    def is_done(self, image_id: str) -> bool:
        return image_id in self.store or image_id in self.quarantine

    def start_progress(self, total: int | None) -> None:
        from tqdm.auto import tqdm

        done = len(self.store) + len(self.quarantine)
        self.bar = tqdm(
            total=total, initial=min(done, total) if total else done, unit="img", desc="captioning",
            disable=not self.job.progress, dynamic_ncols=True, smoothing=0.1,
        )
        self.loop_t0 = time.perf_counter()

    @contextmanager
    def captions_in_flight(self, n: int) -> Iterator[None]:
        """While a batch of ``n`` captions is with the model, move the bar as each one completes
        (:mod:`vlrl.core.progress`); their records, committed after, do not move it again."""
        if self.bar is None or self.bar.disable:
            yield
            return
        credit = Credit(self.bar.update)
        credit.start(n)
        try:
            with on_requests(credit):
                yield
        finally:
            self._prepaid += credit.settle()

    def add_quarantined(self, item_id: str, reason: str, locator: dict | None = None) -> None:
        if item_id not in self.quarantine:
            self._start_work()
            self.quarantine.add(item_id, reason, locator=locator or {})
            self.new_quarantined += 1
            self.guard.quarantined += 1
        self._tick(1)

    def add_caption(self, record: dict[str, Any]) -> None:
        self._start_work()
        if self.store.append(record):
            self.new += 1
            self.guard.done += 1
            self.models.add(record["model"])
            self.health.add(record.get("caption"), record.get("finish_reason"))
        self.guard.breaker.success()
        self._tick(1)

    def add_failure(self, item_id: str, error: str) -> None:
        """A record the backend failed after its retries (an error, or a reply with no answer such as
        empty content): counted toward the exit code and the breaker, its reason logged and kept in
        the manifest's ``this_run.failures``, and left for the next run. Not quarantined: quarantine
        is for inputs that can never succeed, and a rerun of a job whose server answered nothing
        would otherwise exit 0 with those images missing."""
        self.failed += 1
        if len(self.failures) < FAILURES_KEPT:
            self.failures[item_id] = error
        self.guard.failed += 1
        logger.warning("backend failed on %s: %s (will retry on the next run)", item_id, error)
        self._tick(1)
        self.guard.breaker.failure(f"{item_id}: {error}")

    def _tick(self, n: int) -> None:
        if self.bar is not None:
            shown = min(n, self._prepaid)
            self._prepaid -= shown
            if n > shown:
                self.bar.update(n - shown)
            post = {k: v for k, v in {"quarantined": self.new_quarantined, "failed": self.failed,
                                      **self.health.as_dict()}.items() if v}
            if post:
                self.bar.set_postfix(post, refresh=False)
        if self.started_work and time.perf_counter() - self._last_manifest > 30:
            self.write_manifest("running")

    def write_manifest(self, status: str) -> dict[str, Any]:
        self._last_manifest = time.perf_counter()
        m = self.manifest(status)
        atomic_write_json(self.manifest_path, m)
        return m

    def manifest(self, status: str) -> dict[str, Any]:
        elapsed = time.perf_counter() - (self.loop_t0 or self.t0)
        working = elapsed - self.model_load_seconds
        ext = "jsonl" if self.job.output_format == "jsonl" else "parquet"
        m = {
            "status": status,
            "job": self.fp,
            "engine": self.job.engine,
            "backends": sorted(self.models),
            "output": {
                "format": self.job.output_format,
                "data_files": f"captions/{self.job.names()['prefix']}-*.{ext}",
                "parts": self.store.files(),
                "quarantine": self.job.names()["quarantine"],
                "load_with": "datasets.load_dataset(OUT, split='train')",
            },
            # empty: whitespace only; truncated: stopped at --max-tokens (vlrl.core.outputs)
            "counts": {"captioned": len(self.store), "quarantined": len(self.quarantine),
                       **{k: self.health_before[k] + v for k, v in self.health.as_dict().items()}},
            "this_run": {
                "started_at": self.started,
                "updated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "captioned": self.new,
                "quarantined": self.new_quarantined,
                "failed": self.failed,
                "failures": dict(self.failures),  # image_id -> reason, the first FAILURES_KEPT
                **self.health.as_dict(),
                "seconds": round(elapsed, 3),
                "model_load_seconds": round(self.model_load_seconds, 3),
                "images_per_s": round(self.new / working, 4) if working > 0 else None,
                "peak_rss_mb": round(peak_rss_mb(), 1),
            },
        }
        return m

    def close(self, interrupted: bool = False) -> dict[str, Any]:
        """Finish the run; the manifest is written only when the folder holds work of this job."""
        if self._closed is not None:
            return self._closed
        try:
            if self.bar is not None:
                self.bar.close()
            self.store.close(finalize=not interrupted)
            self.quarantine.close()
            self.health.check()  # once per run, if the run did not warn already
            stopped_early = self.job.limit is not None and self.new >= self.job.limit
            status = "interrupted" if interrupted else ("incomplete" if self.failed or stopped_early else "complete")
            self._closed = self.write_manifest(status) if self.started_work else self.manifest(status)  # nothing committed: no identity on disk
            return self._closed
        finally:
            self.guard.__exit__(None, None, None)
