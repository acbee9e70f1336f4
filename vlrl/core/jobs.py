"""What every long vlrl job shares: one writer, one identity, a failure budget, honest exit codes.

A dataset job runs for hours into an output folder, and the folder outlives the process. So:

* **One writer.** :class:`Job` takes an exclusive ``fcntl.flock`` on ``OUT/.lock[-shardIofN]`` for
  its lifetime. The kernel drops the lock when the process dies, ``kill -9`` included, so a crash
  never leaves a stale lock to clean up; a second process on the same folder and shard is refused
  with the first one's pid and command.
* **One identity** (:mod:`vlrl.core.identity`). The settings that decide what the outputs mean (source, models, prompts,
  thresholds) are compared with those of the run that wrote the folder. The stored identity is
  written only once work has started (the first record is committed), so a run that failed on a
  wrong model spec leaves nothing behind to refuse the corrected command; and an identity with no
  records behind it is ignored. Paths are compared resolved, so ``out/`` and ``/abs/out`` are one
  job. A refusal lists each changed setting as ``old → new``; ``--force`` starts over.
* **Pre-flight.** :func:`preflight` checks a backend spec in seconds (an ``hf:`` folder whose
  config loads; an ``openai:`` server whose ``/v1/models`` lists the model) before any work.
* **A failure budget.** :class:`CircuitBreaker` stops a job after N consecutive backend failures:
  a dead server must not cost every record its full retry budget.
* **Exit codes** (documented in README.md): :data:`EXIT_OK` when every record succeeded or was
  quarantined, :data:`EXIT_FAILED` when none succeeded (or the breaker stopped the job),
  :data:`EXIT_USAGE` for bad input and refusals, :data:`EXIT_PARTIAL` when the job finished with
  some records failed in the backend (rerun to retry them), :data:`EXIT_INTERRUPTED` on Ctrl-C.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from vlrl.core.backends.base import BackendError
from vlrl.core.backends.probe import PROBE_TIMEOUT_S, probe_backend
from vlrl.core.identity import (  # noqa: F401 - re-exported: the identity names jobs have always offered
    SETTINGS_IGNORED,
    JobMismatch,
    backend_identity,
    check_identity,
    identity_changes,
    job_settings,
    read_identity,
    resolve_source,
)
from vlrl.core.pipeline import atomic_write_json, parse_shard
from vlrl.core.redact import redact

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3
EXIT_INTERRUPTED = 130

DEFAULT_MAX_CONSECUTIVE_FAILURES = 32


def exit_code(succeeded: int, failed: int) -> int:
    """0 when nothing failed, 1 when records failed and none succeeded, 3 when some of each."""
    if not failed:
        return EXIT_OK
    return EXIT_PARTIAL if succeeded else EXIT_FAILED


class JobLocked(ValueError):
    """Another process writes the same output folder and shard."""


class BackendDown(BackendError):
    """The circuit breaker opened: too many consecutive backend failures."""


# -- single writer --------------------------------------------------------------------------------


class OutputLock:
    """An exclusive, non-blocking ``flock`` on ``path``, held until :meth:`release` or process death.

    ``flock`` (not a pid file, not ``filelock``'s soft locks) because the kernel releases it when
    the holder dies however it dies: there is never a stale lock to detect or break.
    """

    def __init__(self, path: str | Path, what: str) -> None:
        self.path = Path(path)
        self.what = what
        self._fh: Any = None

    def acquire(self) -> OutputLock:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the job's lifetime
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise JobLocked(
                f"{self.what}: already being written by {holder}; wait for it to finish "
                "(or stop it) before rerunning, or use another --out / --shard"
            ) from None
        fh.seek(0)
        fh.truncate()
        cmd = " ".join(sys.argv[:1] and [Path(sys.argv[0]).name, *sys.argv[1:]])[:300]
        fh.write(f"pid {os.getpid()} ({redact(cmd)})\n")
        fh.flush()
        self._fh = fh
        return self

    def release(self) -> None:
        if self._fh is not None:
            import fcntl

            try:
                self._fh.seek(0)
                self._fh.truncate()
                fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            finally:
                self._fh.close()
                self._fh = None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# -- pre-flight -----------------------------------------------------------------------------------


def preflight(spec: Any, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Check a backend spec can work, in seconds, before any record is processed.

    The probe is :func:`vlrl.core.backends.probe.probe_backend` (the one training uses too): an
    ``hf:`` folder whose config loads, an ``openai:`` server whose ``/models`` lists the model.
    Raises :class:`BackendError` with one redacted line; anything that is not a spec string (a
    ready backend object) passes.
    """
    probe_backend(spec, timeout).raise_for_problem()


def preflight_all(specs: Iterable[Any]) -> None:
    seen: set[str] = set()
    for s in specs:
        if isinstance(s, str) and s not in seen:
            seen.add(s)
            preflight(s)


# -- failure budget -------------------------------------------------------------------------------


class CircuitBreaker:
    """Opens after ``limit`` consecutive failures; any success closes it again (0 disables it)."""

    def __init__(self, limit: int = DEFAULT_MAX_CONSECUTIVE_FAILURES, what: str = "backend") -> None:
        self.limit = limit
        self.what = what
        self.consecutive = 0
        self.last: str | None = None
        self.opened = False

    def success(self, n: int = 1) -> None:
        if n and not self.opened:
            self.consecutive = 0

    def failure(self, reason: str | None = None, n: int = 1) -> None:
        self.consecutive += n
        self.last = reason or self.last
        self.check()

    def check(self) -> None:
        """Raise :class:`BackendDown` if open (it stays open: a pipeline that swallows the first
        exception gets it again at its next model call, which is then not sent)."""
        if self.limit and self.consecutive >= self.limit:
            self.opened = True
            raise BackendDown(
                f"stopped after {self.consecutive} consecutive {self.what} failures (last: {redact(self.last or 'unknown')}); "
                "fix the backend and rerun the same command to continue"
            )


# -- the job --------------------------------------------------------------------------------------

_CURRENT: list[Job] = []
INTERRUPTED: list[str] = []
"""The Ctrl-C report of the job that was interrupted in this process (at most one line)."""


class Job:
    """One run of a long job into ``out``: lock, identity, breaker, progress counts, Ctrl-C report.

    Usage::

        with Job("qa-curate", out, settings, shard=(i, n), force=force, outputs=[...],
                 has_work=lambda: bool(len(store))) as job:
            ...                  # for each committed record: job.started(); job.done += 1
            job.breaker.failure(reason) / job.breaker.success()

    ``identity_path`` (default ``OUT/job[-shardIofN].json``) holds ``{"command", "job", ...}``; a
    pipeline that keeps its identity elsewhere (``vlrl caption``'s manifest) passes ``stored`` and
    writes it itself.
    """

    def __init__(
        self,
        name: str,
        out: str | Path,
        settings: dict[str, Any],
        *,
        shard: tuple[int, int] = (0, 1),
        force: bool = False,
        outputs: Iterable[str] = (),
        has_work: Callable[[], bool] | None = None,
        identity_path: str | Path | None = None,
        stored: dict[str, Any] | None = None,
        max_consecutive_failures: int = DEFAULT_MAX_CONSECUTIVE_FAILURES,
        observe: bool = False,
    ) -> None:
        """``observe``: feed the breaker from every backend result and record the identity at the
        first record any :class:`~vlrl.core.pipeline.JsonlStore` commits (for pipelines that do
        not count failures and commits themselves)."""
        self.name = name
        self.out = Path(out)
        self.settings = settings
        self.shard = shard
        self.tag = "" if shard[1] == 1 else f"-shard{shard[0]:03d}of{shard[1]:03d}"
        self.force = force
        self.outputs = list(outputs)
        self.has_work = has_work or self._any_output
        self.identity_path = Path(identity_path) if identity_path else self.out / f"job{self.tag}.json"
        self.stored = stored
        self.breaker = CircuitBreaker(max_consecutive_failures)
        self.lock = OutputLock(self.out / f".lock{self.tag}", f"{self.out}{' shard ' + '/'.join(map(str, shard)) if shard[1] > 1 else ''}")
        self.done = self.failed = self.quarantined = 0
        self._recorded = False
        self.observe = observe
        self.t0 = time.time()

    # outputs that exist (globs relative to out)
    def _existing(self) -> list[Path]:
        found: list[Path] = []
        for pat in self.outputs:
            found += sorted(self.out.glob(pat))
        return found

    def _any_output(self) -> bool:
        return any(p.is_dir() or p.is_file() and p.stat().st_size > 0 for p in self._existing())

    def __enter__(self) -> Job:
        self.lock.acquire()
        try:
            self._check_other_command()
            if self.force:
                self._start_over()
            else:
                stored = self.stored if self.stored is not None else read_identity(self.identity_path, "job")
                if stored and self.has_work():
                    check_identity(stored, self.settings, where=str(self.out), what=f"vlrl {self.name}")
                self._recorded = bool(stored) and stored == self.settings and self.has_work()
            self._check_other_shards()
        except BaseException:
            self.lock.release()
            raise
        _CURRENT.append(self)
        if self.observe:
            from vlrl.core import pipeline
            from vlrl.core.backends import base

            base.OBSERVERS.append(self._on_results)
            pipeline.COMMIT_HOOKS.append(self._on_commit)
        return self

    def _check_other_command(self) -> None:
        """One command per ``--out``: a folder holding another command's work (its ``job*.json``
        names it) is refused, even with ``--force`` (which clears only this command's own files), or
        the two commands' files mix in one folder: ``load_dataset(OUT)`` reads both, and a file name
        both use (``captions.jsonl``) is read by the other with the wrong columns."""
        mine = f"vlrl {self.name}"
        for f in sorted(self.out.glob("job*.json")):
            other = (read_identity(f) or {}).get("command")
            if isinstance(other, str) and other != mine:
                raise JobMismatch(f"{self.out}: holds the work of another command ({other}, {f.name}); "
                                  f"{mine} writes its own folder: use a new --out")

    def _other_shards(self) -> list[Path]:
        """The identity files of this job's other shards in ``out`` (and of an unsharded run)."""
        p = self.identity_path
        stem = p.stem[: -len(self.tag)] if self.tag and p.stem.endswith(self.tag) else p.stem
        found = [p.with_name(stem + p.suffix), *sorted(self.out.glob(f"{stem}-shard*of*{p.suffix}"))]
        return [f for f in found if f != p and f.is_file()]

    def _check_other_shards(self) -> None:
        """One identity across shards: every shard in ``out`` must have the same settings and the
        same shard count, or ``load_dataset(OUT)`` mixes rows made two ways (or counts an image
        twice, once per layout). Checked even with ``--force``, which clears only this shard."""
        mine = {k: v for k, v in self.settings.items() if k != "shard"}
        for f in self._other_shards():
            data = read_identity(f)
            other = (data or {}).get("job")
            if not isinstance(other, dict):
                continue
            layout = data.get("shard") or other.get("shard") or [0, 1]
            n = int(layout[1]) if isinstance(layout, (list, tuple)) and len(layout) == 2 else 1
            changes = [] if n == self.shard[1] else [f"shards: {n} → {self.shard[1]}"]
            changes += identity_changes({k: v for k, v in other.items() if k != "shard"}, mine)
            if changes:
                raise JobMismatch(
                    f"{self.out}: another shard of vlrl {self.name} ({f.name}) was made with other settings "
                    f"(changed: {', '.join(c.split(':', 1)[0] for c in changes)}):\n  " + "\n  ".join(changes)
                    + f"\nrun every shard with the same settings and --shard i/{n}, or use a new --out"
                )

    def _on_results(self, results: Any) -> None:
        self.breaker.check()
        if results is None:  # before a call
            return
        bad = [r for r in results if getattr(r, "error", None)]
        if len(bad) < len(results):
            self.breaker.success()
        if bad:
            self.failed += len(bad)
            self.breaker.failure(bad[-1].error, n=len(bad))

    def _on_commit(self) -> None:
        self.done += 1
        self.started()

    def _start_over(self) -> None:
        doomed = self._existing() + ([self.identity_path] if self.identity_path.exists() else [])
        for p in doomed:
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
        if doomed:
            logger.warning("--force: removed %d previous output(s) of this job in %s", len(doomed), self.out)

    def started(self) -> None:
        """Record the identity (once): call when the first record is committed."""
        if not self._recorded:
            self._recorded = True
            if self.stored is None:
                atomic_write_json(self.identity_path, {"command": f"vlrl {self.name}", "job": self.settings,
                                                       "shard": list(self.shard)})

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if _CURRENT and _CURRENT[-1] is self:
            _CURRENT.pop()
        if self.observe:
            from vlrl.core import pipeline
            from vlrl.core.backends import base

            if self._on_results in base.OBSERVERS:
                base.OBSERVERS.remove(self._on_results)
            if self._on_commit in pipeline.COMMIT_HOOKS:
                pipeline.COMMIT_HOOKS.remove(self._on_commit)
        if exc_type is KeyboardInterrupt:
            self.note_interrupt()
        self.lock.release()
        if exc_type is None and self.breaker.opened:
            self.breaker.check()  # the pipeline swallowed the breaker's exception: the job still failed

    def note_interrupt(self) -> None:
        """Remember where the job stopped; the CLI prints it after Ctrl-C (exit code 130)."""
        INTERRUPTED[:] = [self.where_stopped()]

    def where_stopped(self) -> str:
        return (f"vlrl {self.name} interrupted: {self.done} record(s) committed this run, {self.quarantined} quarantined, "
                f"{self.failed} failed, in {self.out}; rerun the same command to resume (finished records are kept)")


def run_command_job(
    name: str,
    out: str | Path,
    params: dict[str, Any],
    fn: Callable[[], Any],
    *,
    specs: Iterable[Any] = (),
    outputs: Iterable[str] = (),
    quarantine: Iterable[str] = (),
    ignore: Iterable[str] = (),
    tolerate_dead: bool = False,
) -> Any:
    """Run a long command's library call as a :class:`Job` (lock, identity, pre-flight, breaker).

    ``params`` are the command's parameters (``locals()`` at its top); ``force``,
    ``retry_quarantined`` and ``max_consecutive_failures`` are read from them, and so are the image
    flags ``max_image_pixels`` / ``resize_max_pixels`` (applied to every image the job opens;
    raising the limit does not change the job's identity). ``specs`` are the
    backend specs to pre-flight; ``outputs`` the globs (under ``out``) that hold the job's work;
    ``quarantine`` the files ``--retry-quarantined`` moves aside. The lock covers the whole folder.
    ``tolerate_dead``: a committee job (teacher captions) goes on without the backends that fail
    pre-flight (each is one warning line) and fails only when every one does.
    """
    settings = job_settings(params, ignore)
    if "shard" in params:  # the shard count is part of the layout every shard shares (the index is not)
        settings["shards"] = parse_shard(params.get("shard"))[1]
    job = Job(name, out, settings, force=bool(params.get("force")), outputs=outputs,
              max_consecutive_failures=int(params.get("max_consecutive_failures", DEFAULT_MAX_CONSECUTIVE_FAILURES)),
              observe=True)
    with job:
        if params.get("retry_quarantined"):
            for q in quarantine:
                retry_quarantined(Path(out) / q)
        if tolerate_dead:
            errors = []
            for spec in (specs := list(specs)):
                try:
                    preflight(_spec_of(spec))
                except BackendError as e:
                    errors.append(e)
                    logger.warning("pre-flight: %s (going on without it)", e)
            if specs and len(errors) == len(specs):
                raise errors[0]
        else:
            preflight_all(_spec_of(s) for s in specs)
        from vlrl.core.images import image_limits_of

        with image_limits_of(params):
            return fn()


def _spec_of(value: Any) -> Any:
    """``NAME=SPEC`` → ``SPEC`` (teacher and captioner flags name their backends)."""
    if isinstance(value, str) and "=" in value.split(":", 1)[0]:
        return value.split("=", 1)[1]
    return value


def current_job() -> Job | None:
    return _CURRENT[-1] if _CURRENT else None


def retry_quarantined(path: str | Path) -> int:
    """Move a quarantine file aside (``NAME.jsonl.retried-TIMESTAMP``) so its records are processed again.

    Returns how many records it held. The old file is kept so the earlier reasons are not lost.
    """
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return 0
    with open(path, "rb") as fh:
        n = sum(1 for line in fh if line.strip())
    stamp = time.strftime("%Y%m%dT%H%M%S")
    # the new name must not match the pipelines' ``*.jsonl`` globs, nor replace an earlier backup
    # (two retries in one second, or a clock set back, would give the same stamp)
    backup, k = path.with_name(f"{path.name}.retried-{stamp}"), 1
    while backup.exists():
        backup, k = path.with_name(f"{path.name}.retried-{stamp}-{k}"), k + 1
    path.rename(backup)
    logger.info("--retry-quarantined: %d record(s) of %s will be retried", n, path.name)
    return n
