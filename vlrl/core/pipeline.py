"""Building blocks of every long-running vlrl job: exactly-once JSONL stores, quarantine, shards.

A dataset builder that runs for hours must survive ``kill -9`` at any instant and, when rerun with
the same command, finish with every record written exactly once. The recipe used throughout vlrl:

1. Each unit of work has a stable *key* (an image id, an (image, teacher) pair).
2. Results are appended to a JSONL file one line at a time, flushed and fsynced. A line is the
   commit: either it is all there or the job never finished that unit.
3. On restart :class:`JsonlStore` truncates a torn last line, reads the keys already written, and
   the job skips them. Paid-for model calls are replayed from the response cache, so redoing a
   unit that was in flight costs nothing.

Bad records never stop a job: they go to a :class:`JsonlStore` named ``quarantine.jsonl`` with the
reason, keyed the same way so a rerun does not list them twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Literal

from vlrl.core.redact import scrub

logger = logging.getLogger(__name__)

COMMIT_HOOKS: list[Any] = []
"""Called (no arguments) after every record a :class:`JsonlStore` commits: the running job records
its identity on the first one (see :mod:`vlrl.core.jobs`)."""


class JsonlStore:
    """Append-only JSONL file whose records are unique by ``key_field``."""

    def __init__(self, path: str | Path, key_field: str = "id", fsync: bool = True) -> None:
        self.path = Path(path)
        self.key_field = key_field
        self.fsync = fsync
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._keys: set[str] = set()
        self._repair_and_index()
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - held open for appends

    def _repair_and_index(self) -> None:
        """Index the stored keys. Bad lines after the last good record are a torn tail (a killed
        writer) and are dropped; a bad line *before* a good one is corruption (a disk, an editor),
        not a kill: it is moved to ``NAME.corrupt`` with a warning, and the good records after it
        are kept rather than discarded as a "torn last record"."""
        if not self.path.exists():
            return
        good_end, last_good, bad = 0, 0, []
        with open(self.path, "rb") as fh:
            offset = 0
            for lineno, line in enumerate(fh, 1):
                offset += len(line)
                rec = self._parse(line)
                if rec is None:
                    bad.append(lineno)
                    continue
                self._keys.add(str(rec[self.key_field]))
                good_end, last_good = offset, lineno
        middle = {n for n in bad if n < last_good}
        if middle:
            self._move_corrupt(middle, last_good)
            logger.warning("%s: moved %d corrupt line(s) (line %s) to %s; the records after them are kept",
                           self.path, len(middle), ", ".join(map(str, sorted(middle)[:5])),
                           self.path.name + ".corrupt")
        elif good_end != self.path.stat().st_size:
            logger.warning("%s: dropping a torn last record left by an interrupted run", self.path)
            with open(self.path, "r+b") as fh:
                fh.truncate(good_end)

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        if not line.endswith(b"\n"):
            return None
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        return rec if isinstance(rec, dict) and self.key_field in rec else None

    def _move_corrupt(self, lines: set[int], last_good: int) -> None:
        """Rewrite the file without ``lines`` (appended to ``NAME.corrupt``) and without the torn
        tail after ``last_good``."""
        with open(self.path, "rb") as src, atomic_open(self.path, "wb") as dst, \
                open(self.path.with_name(self.path.name + ".corrupt"), "ab") as side:
            for lineno, line in enumerate(src, 1):
                if lineno > last_good:
                    break
                (side if lineno in lines else dst).write(line if line.endswith(b"\n") else line + b"\n")

    def __contains__(self, key: object) -> bool:
        return str(key) in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def keys(self) -> set[str]:
        return set(self._keys)

    def append(self, record: dict[str, Any]) -> bool:
        """Write ``record`` unless its key is already stored. Returns whether it was written."""
        key = str(record[self.key_field])
        if key in self._keys:
            return False
        self._fh.write(json_line(record))
        self._fh.flush()
        if self.fsync:
            os.fsync(self._fh.fileno())
        self._keys.add(key)
        for hook in list(COMMIT_HOOKS):
            hook()
        return True

    def sync(self) -> None:
        """Flush and fsync what was appended (callers that pass ``fsync=False`` fsync once per batch)."""
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._fh.flush()
        yield from read_jsonl(self.path)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> JsonlStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Quarantine(JsonlStore):
    """Records a pipeline could not process, with the reason; logged as one line each."""

    def __init__(self, path: str | Path, key_field: str = "id") -> None:
        super().__init__(path, key_field=key_field)

    def add(self, key: str, reason: str, **extra: Any) -> None:
        from vlrl.core.redact import redact

        reason = redact(reason)  # reasons quote server answers and paths; never a credential
        if self.append({self.key_field: key, "reason": reason, **extra}):
            logger.warning("quarantined %s: %s", key, reason)


def parse_shard(spec: str | None) -> tuple[int, int]:
    """``"i/n"`` → (i, n) with 0 <= i < n; ``None`` → (0, 1)."""
    if not spec:
        return 0, 1
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"--shard {spec!r}: expected 'i/n' such as 0/4") from None
    if n < 1 or not 0 <= i < n:
        raise ValueError(f"--shard {spec!r}: need 0 <= i < n")
    return i, n


def in_shard(key: str, shard: tuple[int, int]) -> bool:
    """Stable assignment of a key to one of n shards (independent of enumeration order)."""
    i, n = shard
    if n == 1:
        return True
    return int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) % n == i


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Open ``path`` for writing so a reader (or a killed writer) never sees half a file.

    The content goes to a temporary file in the same folder, is fsynced, and replaces ``path`` in
    one rename when the block ends without an error. On any error (unencodable text, a folder in the
    way, a full disk) the temporary file is removed and ``path`` keeps what it had.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Write one JSON document atomically (see :func:`atomic_open`)."""
    with atomic_open(path) as fh:
        fh.write(scrub(json.dumps(obj, indent=2, ensure_ascii=False, default=str)))


def json_line(record: dict[str, Any]) -> str:
    """One JSONL line for ``record``, with every configured secret masked by value
    (:func:`~vlrl.core.redact.scrub`): a server that echoes the API key into an answer, an error or a
    reason must not put it in any file a job commits, whichever writer commits it."""
    return scrub(json.dumps(record, ensure_ascii=False, default=str)) + "\n"


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> int:
    """Write a whole JSONL file atomically, one record a line; returns how many were written.

    For files written in one go (exports, reports, datasets). A job that appends as it goes and
    must resume after ``kill -9`` uses :class:`JsonlStore` instead.
    """
    n = 0
    with atomic_open(path) as fh:
        for record in records:
            fh.write(json_line(record))
            n += 1
    return n


def batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


OnError = Literal["raise", "skip", "quarantine"]
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def parse_jsonl_line(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """One JSONL line → ``(record, None)`` or ``(None, one-line reason)``. Never raises.

    A line is bad when it is not UTF-8, not JSON, nested deeper than the parser's recursion limit,
    not a JSON object, or holds an escaped lone surrogate (``"\\ud800"``), which Python accepts
    but no UTF-8 writer can write back out.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as e:
        return None, f"not valid JSON ({e.msg})"
    except RecursionError:
        return None, "not valid JSON (nested too deeply)"
    if not isinstance(rec, dict):
        return None, f"expected a JSON object, got {type(rec).__name__}"
    if _SURROGATE_ESCAPE.search(raw) and _has_lone_surrogate(rec):
        return None, "not valid JSON text (a lone UTF-16 surrogate escape such as \\ud800)"
    return rec, None


def iter_jsonl(path: str | Path, *, torn_tail: bool = False) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """``(line number, record, reason)`` for every non-blank line of a JSONL file; never raises on a line.

    A leading UTF-8 BOM (Windows editors write one) is skipped. ``torn_tail=True`` silently ignores
    an unterminated last line: a file another process is still appending to ends mid-record.
    """
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            if torn_tail and not raw.endswith(b"\n"):
                return
            if not raw.strip():
                continue
            rec, reason = parse_jsonl_line(raw)
            yield lineno, rec, reason


def read_jsonl(
    path: str | Path,
    on_error: OnError = "raise",
    *,
    quarantine: JsonlStore | None = None,
    torn_tail: bool = False,
) -> Iterator[dict[str, Any]]:
    """The records of a JSONL file, with the caller's policy for a bad line (see :func:`parse_jsonl_line`).

    * ``"raise"``: ``ValueError("<path>:<line>: <reason>")`` — for files vlrl wrote itself, or inputs
      where one bad line means the whole file is suspect;
    * ``"skip"``: log one warning line naming the file, line and reason, and go on;
    * ``"quarantine"``: also append ``{"key": "<path>:<line>", "reason", "path", "line"}`` to
      ``quarantine`` (a :class:`JsonlStore` keyed by ``key``), so the rerun does not list it twice.
    """
    if on_error not in ("raise", "skip", "quarantine"):
        raise ValueError(f"on_error={on_error!r}: expected 'raise', 'skip' or 'quarantine'")
    if on_error == "quarantine" and quarantine is None:
        raise ValueError("on_error='quarantine' needs a quarantine store")
    for lineno, rec, reason in iter_jsonl(path, torn_tail=torn_tail):
        if rec is not None:
            yield rec
            continue
        if on_error == "raise":
            raise ValueError(f"{path}:{lineno}: {reason}")
        logger.warning("%s:%d: skipping a bad line: %s", path, lineno, reason)
        if quarantine is not None:
            key = f"{path}:{lineno}"
            quarantine.append({quarantine.key_field: key, "reason": reason, "path": str(path), "line": lineno})
