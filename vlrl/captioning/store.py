"""Caption output: rotating append-only shards, exactly-once by ``image_id``.

One JSONL file per million captions is unwieldy to copy and to load in parallel, and a parquet file
cannot be appended to. So captions go to numbered *parts* under ``OUT/captions/``:

* each part is a :class:`vlrl.core.pipeline.JsonlStore` (one flushed line per caption: the commit; fsynced
  once per batch), and a
  new part starts when the current one reaches ``max_records`` lines or ``max_bytes``;
* with ``fmt="parquet"`` a full part (and the last one at the end of the job) is converted to
  ``part-NNNNN.parquet`` by an atomic rename, then its JSONL journal is deleted. A crash between the
  two leaves both files; the next run keeps the parquet and deletes the journal.

On restart the ids of every existing part are read back (``image_id``, ``caption`` and
``finish_reason`` from parquet parts), the job skips them, and appending resumes in the last
unfinished part. The same pass counts the stored captions that are empty or were cut at the length
limit (:attr:`CaptionStore.existing`), so the folder's counts come from its records, exact after a
``kill -9`` as well. ``--shard i/n`` jobs that share an
output folder write parts with their own prefix, so they never touch each other's files.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from vlrl.core.outputs import is_empty
from vlrl.core.pipeline import JsonlStore, read_jsonl

logger = logging.getLogger(__name__)

FORMATS = ("jsonl", "parquet")


def part_prefix(shard: tuple[int, int]) -> str:
    i, n = shard
    return "part" if n == 1 else f"shard{i:03d}of{n:03d}-part"


class CaptionStore:
    """Numbered JSONL (or parquet) parts under ``folder`` whose records are unique by ``image_id``."""

    key_field = "image_id"

    def __init__(
        self,
        folder: str | Path,
        *,
        prefix: str = "part",
        fmt: str = "jsonl",
        max_records: int = 10_000,
        max_bytes: int = 256 * 2**20,
        fsync: bool = False,
    ) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"output format {fmt!r}: expected one of {', '.join(FORMATS)}")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.prefix = prefix
        self.fmt = fmt
        self.max_records = max(1, int(max_records))
        self.max_bytes = int(max_bytes)
        self.fsync = fsync
        self._keys: set[str] = set()
        self._current: JsonlStore | None = None
        self._current_n = 0
        self._next_index = 0
        self.existing = {"empty": 0, "truncated": 0}
        """Empty and truncated captions among the records found on disk when the store opened."""
        self._index_existing()

    def _count(self, records: Any) -> None:
        for r in records:
            self.existing["empty"] += is_empty(r.get("caption"))
            self.existing["truncated"] += r.get("finish_reason") == "length"

    # -- restart ---------------------------------------------------------------------------------
    def _parts(self) -> dict[int, dict[str, Path]]:
        pat = re.compile(re.escape(self.prefix) + r"-(\d{5})\.(jsonl|parquet)$")
        parts: dict[int, dict[str, Path]] = {}
        for p in self.folder.iterdir():
            m = pat.match(p.name)
            if m:
                parts.setdefault(int(m.group(1)), {})[m.group(2)] = p
        return parts

    def _index_existing(self) -> None:
        for tmp in self.folder.glob(f".{self.prefix}-*.parquet.tmp"):
            tmp.unlink()  # a conversion killed before its rename; the journal is still there
        parts = self._parts()
        for k in sorted(parts):
            files = parts[k]
            if "parquet" in files:
                if "jsonl" in files:  # killed between the parquet rename and the journal delete
                    files["jsonl"].unlink()
                rows = _parquet_rows(files["parquet"], (self.key_field, "caption", "finish_reason"))
                self._keys.update(str(r[self.key_field]) for r in rows)
                self._count(rows)
            else:
                with JsonlStore(files["jsonl"], key_field=self.key_field, fsync=self.fsync) as js:
                    self._keys.update(js.keys())
                    n = len(js)
                self._count(read_jsonl(files["jsonl"]))  # read after the store dropped any torn tail
                if k == max(parts) and n < self.max_records and files["jsonl"].stat().st_size < self.max_bytes:
                    self._open(k, n)  # resume appending to the last unfinished part
                elif self.fmt == "parquet":
                    self._finalize(files["jsonl"])
            self._next_index = k + 1

    # -- writing ---------------------------------------------------------------------------------
    def _path(self, k: int, ext: str) -> Path:
        return self.folder / f"{self.prefix}-{k:05d}.{ext}"

    def _open(self, k: int, n: int = 0) -> None:
        self._current = JsonlStore(self._path(k, "jsonl"), key_field=self.key_field, fsync=self.fsync)
        self._current_n = n
        self._next_index = max(self._next_index, k + 1)

    def __contains__(self, key: object) -> bool:
        return str(key) in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def append(self, record: dict[str, Any]) -> bool:
        key = str(record[self.key_field])
        if key in self._keys:
            return False
        if self._current is None:
            self._open(self._next_index)
        assert self._current is not None
        self._current.append(record)
        self._keys.add(key)
        self._current_n += 1
        if self._current_n >= self.max_records or self._current.path.stat().st_size >= self.max_bytes:
            self._rotate()
        return True

    def sync(self) -> None:
        """fsync the open part: call once per batch (per-line fsync costs ms per caption).

        Without it a ``kill -9`` still loses nothing (every line is flushed to the OS at once); only a
        power loss can drop the last batch's lines, which the next run then simply redoes.
        """
        if self._current is not None:
            self._current.sync()

    def _rotate(self) -> None:
        if self._current is None:
            return
        self._current.sync()
        self._current.close()
        path = self._current.path
        self._current = None
        if self.fmt == "parquet":
            self._finalize(path)

    def _finalize(self, jsonl: Path) -> None:
        """Convert a finished JSONL part to parquet atomically, then drop the journal."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = list(read_jsonl(jsonl))
        target = jsonl.with_suffix(".parquet")
        tmp = target.with_name(f".{target.name}.tmp")
        if rows:
            pq.write_table(pa.Table.from_pylist(rows), tmp)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        jsonl.unlink()

    def files(self) -> list[str]:
        """Part file names (relative to the folder), in order."""
        return [p.name for k, files in sorted(self._parts().items()) for p in files.values()]

    def close(self, finalize: bool = True) -> None:
        """Close the open part; with parquet output and ``finalize``, convert it too."""
        if self._current is None:
            return
        if finalize:
            self._rotate()
        else:
            self._current.close()
            self._current = None

    def __enter__(self) -> CaptionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(finalize=exc[0] is None)


def _parquet_rows(path: Path, columns: tuple[str, ...]) -> list[dict[str, Any]]:
    """The given columns of a parquet part (those it has), as rows."""
    import pyarrow.parquet as pq

    names = set(pq.read_schema(path).names)
    return pq.read_table(path, columns=[c for c in columns if c in names]).to_pylist()


DATASET_CARD = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: "captions/*.{ext}"
---
# Captions written by `vlrl caption`

`manifest.json` records the job (source, model, prompt, sampling) and its counts; unreadable images
are listed in `quarantine.jsonl`. Load with `datasets.load_dataset("<this folder>", split="train")`.
"""


def write_dataset_card(out: Path, output_format: str) -> None:
    """A README.md whose YAML ``configs`` point ``datasets.load_dataset(OUT)`` at the caption parts only.

    Without it the json builder also reads ``manifest.json`` and ``quarantine.jsonl`` and fails on the
    mismatched schemas. Every shard of a job writes the same card, so concurrent writers agree.
    """
    ext = "jsonl" if output_format == "jsonl" else "parquet"
    card = out / "README.md"
    text = DATASET_CARD.format(ext=ext)
    if card.is_file() and "written by `vlrl caption`" not in card.read_text(encoding="utf-8"):
        logger.warning("%s is not vlrl's dataset card; left as is (load with data_files=captions/*.%s)", card, ext)
        return
    if not card.is_file() or card.read_text(encoding="utf-8") != text:
        tmp = out / f".README.md.{os.getpid()}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, card)
