"""The one stage loop of vlrl's pipelines: keyed, exactly once, quarantined, batched.

Every long pipeline stage (teacher captions, rubric synthesis, arena judgments, caption-QA scores,
reasoning evaluation, ...) has the same outer shape: take the items whose key is not yet stored,
send them to a model in batches, and write each result as one committed JSONL line, or the reason
it failed. Written once per pipeline, that loop drifted: one skipped its quarantine on resume and
another did not, one lost a whole batch to one bad record, progress and counters differed. So the
shape lives here once, and a stage supplies only what is its own:

* ``key(item)``: the stable identity of a unit of work (an image id, ``image_id::teacher``);
* ``process(batch) -> list[Outcome]``: the model calls for one batch, one :class:`Outcome` per item:
  a record to store (:meth:`Outcome.ok`), a one-line reason the item is bad (:meth:`Outcome.fail`,
  quarantined), or a one-line reason the *backend* failed on it (:meth:`Outcome.retry`: written
  nowhere, so the next run tries again; a failure is never kept as a result).

:func:`run_stage` guarantees the rest:

* **Exactly once on resume.** Keys already in ``store`` (or in any of ``done``: other stores of the
  stage, or the keys other shards wrote) are skipped before
  ``process`` sees them; each record is appended (flushed, fsynced) as soon as its batch returns,
  so a run killed mid-batch loses only that batch's uncommitted work, which the rerun redoes (its
  model calls replay from the response cache).
* **Quarantine.** A failed item's reason goes to ``quarantine`` (keyed like the store) and is
  skipped by later runs unless ``retry_quarantined`` is set: stages whose contract is "failures are
  retried on the next run" (a flaky teacher) pass ``True``; stages that quarantine bad *input*
  (an unreadable image) leave it ``False`` and the CLI's ``--retry-quarantined`` moves the file
  aside instead. Without a quarantine store a failure is logged and left for the next run.
* **Stable batches** (``stable_batches=True``): the batch boundaries are cut over *all* items, done
  ones included, so a resumed run sends a half-finished batch with the same neighbours as before: a
  local model pads a batch to its longest prompt, and other neighbours can change a greedy answer
  and miss the response cache.
* **One bad record never sinks the batch.** When ``process`` raises for a batch, each item is
  retried alone; an item that still raises is quarantined with ``ExceptionType: message`` and the
  others go on. :class:`~vlrl.core.jobs.BackendDown` (the circuit breaker) and ``KeyboardInterrupt``
  are never swallowed.
* **The job.** The current :class:`~vlrl.core.jobs.Job` (``job`` or the one running) is asked
  before every batch whether its circuit breaker is open, hears about every exception-quarantined
  item, and, when it does not observe the backends itself, gets the run's counts and hears of every
  stored record (success) and of the backend failures (:meth:`Outcome.retry`) of each batch that
  stored nothing; on Ctrl-C the loop closes its
  progress bar and the Job prints where it stopped.

Its users: teacher captions, rubric synthesis, the arena, caption-QA, the cold start and Prism's
caption step. ``vlrl caption`` (:mod:`vlrl.captioning.job`) keeps a loop of its own: its unit of commit is a
Parquet/JSONL *part* with a manifest, it prefetches images on threads and can run on Ray, none of
which a per-record JSONL store expresses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from vlrl.core.jobs import BackendDown, Job, current_job
from vlrl.core.pipeline import JsonlStore, Quarantine, batched
from vlrl.core.progress import Credit, LazyBar, on_requests

logger = logging.getLogger(__name__)

DEFAULT_FAILURE_LOG = "{desc}: {label}: {reason}"


@dataclass(frozen=True)
class Outcome:
    """What became of one item: ``record`` to store, or ``reason`` (one line) it failed.

    ``to`` stores the record somewhere other than the stage's store (rubric synthesis sends images
    the student already solves to ``solved.jsonl``); ``extra`` are fields kept beside the reason in
    the quarantine; ``label`` names the item in the failure log line (default: its key).
    """

    key: str
    record: dict[str, Any] | None = None
    reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    to: JsonlStore | None = None
    label: str | None = None
    transient: bool = False

    @classmethod
    def ok(cls, key: str, record: dict[str, Any], *, to: JsonlStore | None = None) -> Outcome:
        return cls(str(key), record=record, to=to)

    @classmethod
    def fail(cls, key: str, reason: str, *, label: str | None = None, **extra: Any) -> Outcome:
        return cls(str(key), reason=" ".join(str(reason).split()) or "failed", extra=extra, label=label)

    @classmethod
    def retry(cls, key: str, reason: str, *, label: str | None = None) -> Outcome:
        """The backend failed on this item: logged, counted, never written, retried by the next run."""
        return cls(str(key), reason=" ".join(str(reason).split()) or "backend failed", label=label, transient=True)


@dataclass
class StageCounts:
    """What one :func:`run_stage` call did: records ``stored``, items ``quarantined``, items that
    ``failed`` and are left for the next run, and ``skipped`` keys that were done before it started."""

    stored: int = 0
    quarantined: int = 0
    failed: int = 0
    skipped: int = 0


def run_stage(
    items: Iterable[Any],
    *,
    key: Callable[[Any], str],
    process: Callable[[list[Any]], Sequence[Outcome]],
    store: JsonlStore,
    quarantine: JsonlStore | None = None,
    batch_size: int = 16,
    desc: str = "stage",
    done: Sequence[Container[str]] = (),
    retry_quarantined: bool = False,
    stable_batches: bool = False,
    failure_log: str | None = DEFAULT_FAILURE_LOG,
    job: Job | None = None,
    progress: bool = True,
    progress_by: str | None = None,
) -> StageCounts:
    """Run ``process`` over every item whose key is not done yet; see the module docstring.

    ``progress_by`` makes the bar move while a batch is with the model (:mod:`vlrl.core.progress`):
    ``"item"`` when each item is one model request (a caption), so the item bar advances as each
    one completes; a unit name (``"ask"``, ``"request"``) adds a second bar counting that stage's
    model requests as they complete.
    Without it the bar moves once per batch.

    ``items`` may be a generator (it is consumed lazily, one batch at a time). ``failure_log`` is
    the format of the one warning line per failure (``{desc}``, ``{key}``, ``{label}``,
    ``{reason}``); a :class:`~vlrl.core.pipeline.Quarantine` logs its own line instead, and
    ``None`` says ``process`` already logged each failure (one line per failure, not two).
    """
    job = job if job is not None else current_job()
    counts = StageCounts()
    seen: set[str] = set()

    def is_done(k: str) -> bool:
        return k in store or any(k in d for d in done) or (
            quarantine is not None and not retry_quarantined and k in quarantine)

    def keyed() -> Iterator[tuple[str, Any]]:
        for item in items:
            k = str(key(item))
            if k not in seen:
                seen.add(k)
                yield k, item

    def fresh(cut: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
        for k, item in cut:
            if is_done(k):
                counts.skipped += 1
            else:
                yield k, item

    def pending() -> Iterator[list[tuple[str, Any]]]:
        if not stable_batches:
            yield from batched(fresh(keyed()), batch_size)
            return
        for cut in batched(keyed(), batch_size):
            if todo := list(fresh(cut)):
                yield todo

    counting = job is not None and not job.observe  # an observing job counts for itself

    def log(k: str, oc: Outcome, reason: str) -> None:
        if failure_log is not None:
            logger.warning(failure_log.format(desc=desc, key=k, label=oc.label or k, reason=reason))

    def commit(k: str, oc: Outcome) -> str | None:
        """Write one outcome; returns the reason of a backend failure (for the breaker)."""
        if oc.reason is None and oc.record is not None:
            if (store if oc.to is None else oc.to).append(oc.record):  # (an empty store is falsy)
                counts.stored += 1
                if counting:
                    job.started()
                    job.done += 1
                    job.breaker.success()
            return None
        reason = oc.reason or "the stage returned no record"
        if oc.transient or quarantine is None:
            counts.failed += 1
            log(k, oc, reason)
            if counting:
                job.failed += 1
            return reason if oc.transient else None
        counts.quarantined += 1
        if job is not None:
            job.quarantined += 1
            if counting:
                job.started()
        if isinstance(quarantine, Quarantine):
            quarantine.add(k, reason, **oc.extra)  # redacts the reason and logs its own line
        else:
            log(k, oc, reason)
            quarantine.append({quarantine.key_field: k, **oc.extra, "reason": reason})
        return None

    raised: list[str] = []  # the reasons of the items whose processing raised, in the current batch

    def run_batch(batch: list[tuple[str, Any]]) -> list[Outcome]:
        try:
            return list(process([item for _, item in batch]))
        except (BackendDown, KeyboardInterrupt):
            raise
        except Exception as e:  # noqa: BLE001 - isolated below: one bad record must not sink the batch
            if len(batch) > 1:
                logger.warning("%s: a batch of %d raised %s; retrying its items one by one", desc, len(batch), type(e).__name__)
                return [oc for one in batch for oc in run_batch([one])]
            reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
            raised.append(reason)
            return [Outcome.fail(batch[0][0], reason)]

    batches: Iterable[list[tuple[str, Any]]] = pending()
    total = None
    if isinstance(items, Sequence):  # a list: count what is left up front, for the progress bar
        batches = list(batches)
        total = sum(map(len, batches))
    bar = tqdm(total=total, desc=desc, unit="item", disable=not progress)
    sub = None
    if progress_by not in (None, "item"):
        sub = LazyBar(f"{desc} {progress_by}s", unit=progress_by, enabled=progress)
    credit = Credit(bar.update)
    tick = (credit if progress_by == "item" else sub.update) if progress_by and progress else None
    try:
        for batch in batches:
            if job is not None:
                job.breaker.check()
            credit.start(len(batch))
            with on_requests(tick) if tick is not None else nullcontext():
                by_key = {oc.key: oc for oc in run_batch(batch)}
            stored = counts.stored
            down = [why for k, _ in batch
                    if (why := commit(k, by_key.get(k) or Outcome.fail(k, "the stage returned no outcome for this item")))]
            if (rest := len(batch) - credit.settle()) > 0:
                bar.update(rest)
            # a batch that stored anything shows the backend is up; only all-failed batches count towards
            # the breaker, and only after the whole batch is committed (it may stop the job)
            if down and counting and counts.stored == stored:
                job.breaker.failure(down[-1], n=len(down))
            if raised and job is not None:  # no backend result tells an observing job about these
                job.breaker.failure(raised[-1], n=len(raised))
            raised.clear()
    finally:
        bar.close()
        if sub is not None:
            sub.close()
        for s in {id(s): s for s in (store, quarantine, *done) if isinstance(s, JsonlStore)}.values():
            if not s.fsync:
                s.sync()
    return counts

