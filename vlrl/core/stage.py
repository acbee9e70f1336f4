"""The one stage loop of vlrl's pipelines: keyed, exactly once, quarantined, batched.

Every long pipeline stage (teacher captions, rubric synthesis, arena judgments, caption-QA scores,
reasoning evaluation, ...) has the same outer shape: take the items whose key is not yet stored,
send them to a model in batches, and write each result as one committed JSONL line, or the reason
it failed. Written once per pipeline, that loop drifted: one skipped its quarantine on resume and
another did not, one lost a whole batch to one bad record, progress and counters differed. So the
shape lives here once, and a stage supplies only what is its own:

* ``key(item)``: the stable identity of a unit of work (an image id, ``image_id::teacher``);
* ``process(batch) -> list[Outcome]``: the model calls for one batch, one :class:`Outcome` per item,
  either a record to store or a one-line reason.

:func:`run_stage` guarantees the rest:

* **Exactly once on resume.** Keys already in ``store`` (or in any of ``done``) are skipped before
  ``process`` sees them; each record is appended (flushed, fsynced) as soon as its batch returns,
  so a run killed mid-batch loses only that batch's uncommitted work, which the rerun redoes (its
  model calls replay from the response cache).
* **Quarantine.** A failed item's reason goes to ``quarantine`` (keyed like the store) and is
  skipped by later runs unless ``retry_quarantined`` is set: stages whose contract is "failures are
  retried on the next run" (a flaky teacher) pass ``True``; stages that quarantine bad *input*
  (an unreadable image) leave it ``False`` and the CLI's ``--retry-quarantined`` moves the file
  aside instead. Without a quarantine store a failure is logged and left for the next run.
* **One bad record never sinks the batch.** When ``process`` raises for a batch, each item is
  retried alone; an item that still raises is quarantined with ``ExceptionType: message`` and the
  others go on. :class:`~vlrl.core.jobs.BackendDown` (the circuit breaker) and ``KeyboardInterrupt``
  are never swallowed.
* **The job.** The current :class:`~vlrl.core.jobs.Job` (``job`` or the one running) is asked
  before every batch whether its circuit breaker is open, hears about every exception-quarantined
  item, and gets the counts of a run it does not observe itself; on Ctrl-C the loop closes its
  progress bar and the Job prints where it stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from vlrl.core.pipeline import JsonlStore, Quarantine, batched

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

    @classmethod
    def ok(cls, key: str, record: dict[str, Any], *, to: JsonlStore | None = None) -> Outcome:
        return cls(str(key), record=record, to=to)

    @classmethod
    def fail(cls, key: str, reason: str, *, label: str | None = None, **extra: Any) -> Outcome:
        return cls(str(key), reason=" ".join(str(reason).split()) or "failed", extra=extra, label=label)


@dataclass
class StageCounts:
    """What one :func:`run_stage` call did (``skipped``: keys already done before it started)."""

    stored: int = 0
    failed: int = 0
    quarantined: int = 0
    skipped: int = 0

    @property
    def processed(self) -> int:
        return self.stored + self.failed


def run_stage(
    items: Iterable[Any],
    *,
    key: Callable[[Any], str],
    process: Callable[[list[Any]], Sequence[Outcome]],
    store: JsonlStore,
    quarantine: JsonlStore | None = None,
    batch_size: int = 16,
    desc: str = "stage",
    done: Sequence[JsonlStore] = (),
    retry_quarantined: bool = False,
    failure_log: str = DEFAULT_FAILURE_LOG,
    job: Any = None,
    progress: bool = True,
) -> StageCounts:
    """Run ``process`` over every item whose key is not done yet; see the module docstring.

    ``items`` may be a generator (it is consumed lazily, one batch at a time). ``failure_log`` is
    the format of the one warning line per failure (``{desc}``, ``{key}``, ``{label}``,
    ``{reason}``); a :class:`~vlrl.core.pipeline.Quarantine` logs its own line instead.
    """
    from vlrl.core.jobs import BackendDown, current_job

    job = job if job is not None else current_job()
    counts = StageCounts()
    seen: set[str] = set()

    def todo() -> Iterable[tuple[str, Any]]:
        for item in items:
            k = str(key(item))
            if k in seen:
                continue
            seen.add(k)
            if k in store or any(k in d for d in done) or (
                    quarantine is not None and not retry_quarantined and k in quarantine):
                counts.skipped += 1
                continue
            yield k, item

    def commit(k: str, oc: Outcome) -> None:
        if oc.reason is None and oc.record is not None:
            if (store if oc.to is None else oc.to).append(oc.record):  # an empty store is falsy
                counts.stored += 1
            return
        reason = oc.reason or "the stage returned no record"
        counts.failed += 1
        if isinstance(quarantine, Quarantine):
            quarantine.add(k, reason, **oc.extra)
        else:
            logger.warning(failure_log.format(desc=desc, key=k, label=oc.label or k, reason=reason))
            if quarantine is not None:
                quarantine.append({quarantine.key_field: k, **oc.extra, "reason": reason})
        if quarantine is not None:
            counts.quarantined += 1

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
            if job is not None:
                job.breaker.failure(reason)  # raises BackendDown when the failures run on
            return [Outcome.fail(batch[0][0], reason)]

    pending: Iterable[tuple[str, Any]] = todo()
    if isinstance(items, Sequence):  # a list: count what is left up front, for the progress bar
        pending = list(pending)
    bar = tqdm(total=len(pending) if isinstance(pending, list) else None, desc=desc, unit="item", disable=not progress)
    before = (counts.stored, counts.failed, counts.quarantined)
    try:
        for batch in batched(pending, batch_size):
            if job is not None:
                job.breaker.check()
            by_key = {oc.key: oc for oc in run_batch(batch)}
            for k, _ in batch:
                commit(k, by_key.get(k) or Outcome.fail(k, "the stage returned no outcome for this item"))
            _tell_job(job, counts, before)
            before = (counts.stored, counts.failed, counts.quarantined)
            bar.update(len(batch))
    finally:
        bar.close()
        for s in {id(s): s for s in (store, quarantine, *done) if s is not None}.values():
            if not s.fsync:
                s.sync()
    return counts


def _tell_job(job: Any, counts: StageCounts, before: tuple[int, int, int]) -> None:
    """Counts for the job's exit code and Ctrl-C report (an observing job counts commits itself)."""
    if job is None:
        return
    stored, failed, quarantined = (counts.stored - before[0], counts.failed - before[1],
                                   counts.quarantined - before[2])
    job.quarantined += quarantined
    if getattr(job, "observe", False):
        return
    job.done += stored
    job.failed += failed - quarantined
    if stored:
        job.started()
        job.breaker.success()
