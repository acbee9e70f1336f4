"""The scoring core of ``vlrl serve reward``: one reward, batched across concurrent requests.

Why batch here: a trainer process sends the rows of its own micro-batch, often a handful, and a
fleet sends many such requests at once. The answerer is fastest on full batches, so requests wait
in one queue up to ``max_wait_ms`` (or until ``max_batch_rows`` rows are queued) and are scored
together. Rows of different ``step`` are never mixed in one call, because the step seeds a
reward's draws (caprl_qa); rows of one step from any number of requests are, because a reward's
draws are per row (image and question), never per batch. Every row keeps its request and position,
so each request gets exactly its own rows back, in its own order.

The call is :func:`vlrl.rewards.scoring.score_batch`, the one ``vlrl reward score`` makes: a reward
that raises on a batch is retried row by row, so one bad row gets an error and the rest are scored.
Calls run one at a time on one worker thread: a reward (its backends, its caches) is used by one
thread at a time, as in a trainer.

Readiness: the reward's backends (every ``hf:``/``openai:`` spec in its settings) are probed with
the pre-flight every job uses before the service says it is ready. A batch in which every row's
backend failed makes the service probe again; when the probe fails, the service is not ready, the
batch's requests get 503 with the reason (never a row of made-up numbers), and later requests get
503 until a probe passes again (probes are at most every ``reprobe_s`` seconds).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from vlrl.core.redact import redact
from vlrl.rewards.base import BACKEND_FAILED, Reward, Score
from vlrl.rewards.scoring import jsonable, row_problem, score_batch

logger = logging.getLogger(__name__)


ROW_ERROR = "_vlrl_row_error"
"""A row key an endpoint's payload mapping sets when it cannot make a row of an item (its reason):
that row gets this error and the others are scored."""


class Unavailable(RuntimeError):
    """The service cannot score now (a backend is down, or it is draining): HTTP 503 with this reason."""


@dataclass
class ServeSettings:
    """What ``vlrl serve reward`` hands to every replica (plain data: Ray pickles it)."""

    reward: str
    settings: dict[str, Any] = field(default_factory=dict)
    max_batch_rows: int = 256
    """At most this many rows per reward call."""
    max_wait_ms: float = 20.0
    """How long the first queued request waits for others to fill its batch."""
    max_rows: int = 4096
    """Rows per request; more is a 413."""
    max_body_bytes: int = 64 * 2**20
    """Bytes per request body; more is a 413."""
    max_queued_rows: int = 65536
    """Rows waiting in the queue; beyond, a request gets 503 with ``Retry-After`` (back-pressure)."""
    label_column: str | None = None
    """The column OpenRLHF's ``labels`` fill (default: the reward's first required column, else ``answer``)."""
    token_env: str | None = None
    """Environment variable holding the bearer token every request but ``/health`` must send."""
    reprobe_s: float = 5.0
    """Shortest time between two pre-flight probes of a backend that was down."""


def backend_specs(settings: Any) -> list[str]:
    """Every ``hf:``/``openai:`` spec in a reward's settings (its answerer, judge, guard judges)."""
    out: list[str] = []
    if isinstance(settings, str):
        if settings.startswith(("hf:", "openai:")):
            out.append(settings)
    elif isinstance(settings, dict):
        for v in settings.values():
            out += backend_specs(v)
    elif isinstance(settings, list):
        for v in settings:
            out += backend_specs(v)
    return list(dict.fromkeys(out))


@dataclass
class _Job:
    step: int
    rows: list[dict]
    future: asyncio.Future
    results: list[Score | Exception | None] = field(default_factory=list)


class RewardService:
    """One built reward, a queue and a batcher. ``await score(rows, step)`` from any request."""

    def __init__(self, conf: ServeSettings, reward: Reward | None = None, metrics: Any = None) -> None:
        from vlrl.rewards import build_reward

        self.conf = conf
        self.reward = reward if reward is not None else build_reward(conf.reward, **dict(conf.settings))
        self.required = tuple(getattr(self.reward, "required_columns", ()) or ())
        self.backends = backend_specs(conf.settings)
        self.metrics = metrics
        self.problem: str | None = "pre-flight has not run yet"
        self.draining = False
        self._probed_at = 0.0
        self._probe_lock = threading.Lock()
        self._queue: asyncio.Queue[_Job] | None = None
        self._queued_rows = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vlrl-reward")
        self._task: asyncio.Task | None = None
        self._busy = 0

    @property
    def name(self) -> str:
        return str(getattr(self.reward, "name", self.conf.reward))

    # -- readiness --------------------------------------------------------------------------------

    def probe(self, force: bool = False) -> str | None:
        """Probe every backend (at most every ``reprobe_s`` unless ``force``); None when all can serve.

        A probe can take its whole timeout per backend (a server that accepts and never answers), so
        it runs on a worker thread, never on the event loop, and a caller that does not force one
        takes the verdict so far rather than waiting for a probe already running."""
        from vlrl.core.backends.probe import probe_backend

        if not force and self.problem is None:
            return None
        if not self._probe_lock.acquire(blocking=force):
            return self.problem
        try:
            if not force and time.monotonic() - self._probed_at < self.conf.reprobe_s:
                return self.problem
            self._probed_at = time.monotonic()
            problems = [p for s in self.backends if (p := probe_backend(s).problem) is not None]
            was = self.problem
            self.problem = redact("; ".join(problems)) if problems else None
        finally:
            self._probe_lock.release()
        if self.problem != was:
            if self.problem:
                logger.error("reward %s is not ready: %s", self.name, self.problem)
            else:
                logger.info("reward %s is ready (%d backend(s) passed pre-flight)", self.name, len(self.backends))
        if self.metrics is not None:
            self.metrics.ready.set(0 if self.problem else 1)
        return self.problem

    def check_available(self) -> None:
        if self.draining:
            raise Unavailable("the service is shutting down (draining); retry on another replica")
        if self.probe() is not None:
            raise Unavailable(f"reward backend not ready: {self.problem}")

    # -- rows -------------------------------------------------------------------------------------

    def validate(self, rows: Sequence[Any]) -> list[str | None]:
        """One error line per row that cannot be scored (None for a good row)."""
        out: list[str | None] = []
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                out.append(f"row {i}: expected an object, got {type(row).__name__}")
            elif row.get("id") is None or not isinstance(row["id"], (str, int)) or isinstance(row["id"], bool):
                out.append(f"row {i}: missing 'id' (a string or integer)")
            elif row.get(ROW_ERROR):
                out.append(f"id {row['id']!r}: {row[ROW_ERROR]}")
            elif "completion" not in row:
                out.append(f"id {row['id']!r}: missing 'completion'")
            else:
                out.append(row_problem(row, self.required))
        return out

    async def score(self, rows: list[dict], step: int) -> list[dict[str, Any]]:
        """``{"id", "reward", "details", "error"}`` per row, in order. Raises :class:`Unavailable`."""
        if self.draining or self.problem is not None:
            await asyncio.to_thread(self.check_available)  # may re-probe: off the event loop
        if self._queued_rows + len(rows) > self.conf.max_queued_rows:
            raise Unavailable(f"{self._queued_rows} rows are already queued (max_queued_rows "
                              f"{self.conf.max_queued_rows}); retry later")
        errors = self.validate(rows)
        good = [dict(r) for r, e in zip(rows, errors, strict=True) if e is None]
        results: list[Score | Exception | None] = []
        if good:
            job = _Job(int(step), good, asyncio.get_running_loop().create_future())
            self._queued_rows += len(good)
            await self._ensure_started()
            assert self._queue is not None
            await self._queue.put(job)
            try:
                results = await job.future
            finally:
                self._queued_rows -= len(good)
        it = iter(results)
        out = []
        for row, err in zip(rows, errors, strict=True):
            rid = row.get("id") if isinstance(row, dict) else None
            if err is None:
                res = next(it)
                if isinstance(res, Exception):
                    err = redact(f"reward raised {type(res).__name__}: {res}")
                else:
                    out.append({"id": rid, "reward": res.value, "details": jsonable(res.details), "error": None})
                    continue
            logger.warning("step %d: %s", step, err)
            out.append({"id": rid, "reward": None, "details": {"error": err}, "error": err})
        if self.metrics is not None:
            self.metrics.observe_rows(out)
        return out

    # -- the batcher ------------------------------------------------------------------------------

    async def _ensure_started(self) -> None:
        if self._task is None or self._task.done():
            self._queue = asyncio.Queue()
            self._task = asyncio.get_running_loop().create_task(self._batcher())

    async def _batcher(self) -> None:
        assert self._queue is not None
        while True:
            first = await self._queue.get()
            jobs, n = [first], len(first.rows)
            deadline = time.monotonic() + self.conf.max_wait_ms / 1000
            while n < self.conf.max_batch_rows:
                try:  # requests that queued while the last batch ran join at no wait
                    job = self._queue.get_nowait()
                except asyncio.QueueEmpty:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    try:
                        job = await asyncio.wait_for(self._queue.get(), left)
                    except TimeoutError:
                        break
                jobs.append(job)
                n += len(job.rows)
            self._busy += 1
            try:
                await self._run(jobs)
            except Exception as e:  # noqa: BLE001 - the batcher must outlive any batch
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(e)
            finally:
                self._busy -= 1

    async def _run(self, jobs: list[_Job]) -> None:
        """Score the rows of ``jobs``: per step, in calls of at most ``max_batch_rows`` rows."""
        loop = asyncio.get_running_loop()
        by_step: dict[int, list[tuple[_Job, dict]]] = {}
        for job in jobs:
            by_step.setdefault(job.step, []).extend((job, r) for r in job.rows)
        for step, items in by_step.items():
            for start in range(0, len(items), self.conf.max_batch_rows):
                chunk = items[start : start + self.conf.max_batch_rows]
                t0 = time.perf_counter()
                scores = await loop.run_in_executor(self._pool, score_batch, self.reward, [r for _, r in chunk], step)
                if self.metrics is not None:
                    self.metrics.observe_batch(len(chunk), time.perf_counter() - t0, scores, self.reward)
                for (job, _), s in zip(chunk, scores, strict=True):
                    job.results.append(s)
        scores = [s for j in jobs for s in j.results if isinstance(s, Score)]
        failed = any(s.details.get(BACKEND_FAILED) for s in scores)
        if self.backends and failed and not any(s.value is not None and not s.details.get(BACKEND_FAILED) for s in scores):
            # every row's backend failed: is the backend down? Then say so, never return the rows
            problem = await loop.run_in_executor(None, self.probe, True)
            if problem is not None:
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(Unavailable(f"reward backend not ready: {problem}"))
                return
        for job in jobs:
            if not job.future.done():  # a request cancelled meanwhile (its client went away) takes no answer
                job.future.set_result(job.results)

    # -- shutdown ---------------------------------------------------------------------------------

    async def drain(self, timeout_s: float = 60.0) -> None:
        """Refuse new requests (503) and wait until every queued row is scored (or ``timeout_s``)."""
        self.draining = True
        deadline = time.monotonic() + timeout_s
        while (self._queued_rows or self._busy) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self._queued_rows:
            logger.warning("drain timed out with %d rows still queued", self._queued_rows)
        if self._task is not None:
            self._task.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.reward.close()
