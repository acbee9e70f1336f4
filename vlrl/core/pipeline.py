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

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


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
        if not self.path.exists():
            return
        good_end = 0
        with open(self.path, "rb") as fh:
            for line in fh:
                if not line.endswith(b"\n"):
                    break  # torn write from a killed process
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    break
                self._keys.add(str(rec[self.key_field]))
                good_end += len(line)
        if good_end != self.path.stat().st_size:
            logger.warning("%s: dropping a torn last record left by an interrupted run", self.path)
            with open(self.path, "r+b") as fh:
                fh.truncate(good_end)

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
        self._fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self._fh.flush()
        if self.fsync:
            os.fsync(self._fh.fileno())
        self._keys.add(key)
        return True

    def sync(self) -> None:
        """Flush and fsync what was appended (callers that pass ``fsync=False`` fsync once per batch)."""
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._fh.flush()
        with open(self.path, encoding="utf-8") as fh:
            for line in fh:
                yield json.loads(line)

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


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Write JSON so a reader (or a killed writer) never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=2, ensure_ascii=False, default=str)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:  # unencodable text, a folder in the way, a full disk: leave no temp file
        Path(tmp).unlink(missing_ok=True)
        raise


def batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Read a JSONL file, naming the file and line of any malformed record (a leading UTF-8 BOM,
    as Windows editors write, is skipped)."""
    with open(path, encoding="utf-8-sig") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
