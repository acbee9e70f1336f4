"""The one JSONL reader: every kind of bad line gives a one-line reason with its line number, and the
caller's policy (raise / skip / quarantine) decides what happens to the job."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vlrl.core.images import ImageLoadError
from vlrl.core.pipeline import JsonlStore, iter_jsonl, read_jsonl

GOOD = [{"id": "a", "n": 1}, {"id": "b", "text": "caf\u00e9 \U0001f600"}, {"id": "c", "n": 3}]
BAD_LINES = {
    "utf8": b'{"id": "x", "text": "\xff\xfe broken"}',
    "surrogate": b'{"id": "x", "text": "\\ud800 alone"}',
    "deep": b'{"id": "x", "v": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "array": b'["not", "an", "object"]',
    "number": b"42",
    "json": b'{"id": "x", "text": ',
}
EXPECTED = {
    "utf8": "not valid UTF-8 (byte 0xff",
    "surrogate": "lone UTF-16 surrogate",
    "deep": "nested too deeply",
    "array": "expected a JSON object, got list",
    "number": "expected a JSON object, got int",
    "json": "not valid JSON (",
}


def _write(path: Path) -> dict[int, str]:
    """GOOD rows with every bad line in between; returns line number → kind of bad line."""
    lines, where = [], {}
    bad = iter(BAD_LINES.items())
    for rec in GOOD:
        lines.append(json.dumps(rec, ensure_ascii=False).encode())
        for _ in range(2):
            kind, raw = next(bad, (None, None))
            if kind is not None:
                lines.append(raw)
                where[len(lines)] = kind
        lines.append(b"   ")  # blank lines are not records and not errors
    path.write_bytes(b"\n".join(lines) + b"\n")
    return where


def test_every_bad_line_is_a_one_line_reason_with_its_number(tmp_path):
    path = tmp_path / "rows.jsonl"
    where = _write(path)
    got = list(iter_jsonl(path))
    assert [r for _, r, _ in got if r is not None] == GOOD
    bad = {lineno: reason for lineno, r, reason in got if r is None}
    assert set(bad) == set(where)
    for lineno, kind in where.items():
        assert EXPECTED[kind] in bad[lineno], (kind, bad[lineno])
        assert "\n" not in bad[lineno] and len(bad[lineno]) < 200


def test_policies(tmp_path, caplog):
    path = tmp_path / "rows.jsonl"
    where = _write(path)
    first_bad = min(where)
    with pytest.raises(ValueError, match=rf"rows.jsonl:{first_bad}: {EXPECTED[where[first_bad]][:10]}"):
        list(read_jsonl(path))
    with caplog.at_level(logging.WARNING, logger="vlrl.core.pipeline"):
        assert list(read_jsonl(path, "skip")) == GOOD
    assert sum("skipping a bad line" in r.getMessage() for r in caplog.records) == len(where)

    q = JsonlStore(tmp_path / "quarantine.jsonl", key_field="key")
    assert list(read_jsonl(path, "quarantine", quarantine=q)) == GOOD
    assert list(read_jsonl(path, "quarantine", quarantine=q)) == GOOD  # a rerun lists nothing twice
    q.close()
    rows = list(read_jsonl(tmp_path / "quarantine.jsonl"))
    assert sorted(r["line"] for r in rows) == sorted(where)
    assert all(EXPECTED[where[r["line"]]] in r["reason"] for r in rows)
    with pytest.raises(ValueError, match="needs a quarantine store"):
        list(read_jsonl(path, "quarantine"))
    with pytest.raises(ValueError, match="on_error="):
        list(read_jsonl(path, "ignore"))  # type: ignore[arg-type]


def test_bom_and_torn_tail(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "a"}\r\n{"id": "b"}\n{"id": "c", "te')
    with pytest.raises(ValueError, match="rows.jsonl:3: not valid JSON"):
        list(read_jsonl(path))
    assert [r["id"] for r in read_jsonl(path, torn_tail=True)] == ["a", "b"]  # another writer is mid-line


def test_reward_score_cli_survives_every_bad_line(tmp_path):
    """`vlrl reward score` used to die on an invalid UTF-8 line; now each bad line is an error row."""
    path = tmp_path / "rows.jsonl"
    lines = [json.dumps({"id": "ok", "completion": "<think>2+2</think><answer>4</answer>", "answer": "4"}).encode(), *BAD_LINES.values()]
    path.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "scores.jsonl"
    vlrl = str(Path(sys.executable).parent / "vlrl")
    proc = subprocess.run([vlrl, "reward", "score", "--reward", "hfrrf", "--input", str(path), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = list(read_jsonl(out))
    assert [r["reward"] for r in recs][0] == 1.0
    errors = {r["line"]: r["details"]["error"] for r in recs if r["reward"] is None}
    assert sorted(errors) == list(range(2, 2 + len(BAD_LINES)))
    for lineno, kind in zip(range(2, 2 + len(BAD_LINES)), BAD_LINES, strict=True):
        assert EXPECTED[kind] in errors[lineno]
        assert f"rows.jsonl:{lineno}:" in proc.stderr


def test_caption_manifest_quarantines_bad_lines_and_keeps_the_rest(tmp_path):
    """A corpus manifest with a non-UTF-8 or non-object line used to stop `vlrl caption`; now the
    line is an item that fails to open with its reason (the job quarantines it) and the rest is read."""
    from PIL import Image

    from vlrl.core.sources import open_source

    for name in ("a.png", "b.png"):
        Image.new("RGB", (8, 8), "red").save(tmp_path / name)
    lines = [b'{"image": "a.png", "id": "a"}', *BAD_LINES.values(), b'{"image": "b.png", "id": "b"}']
    (tmp_path / "m.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    items = list(open_source(str(tmp_path / "m.jsonl")))
    good = [it for it in items if it.image_id in ("a", "b")]
    assert [it.image_id for it in good] == ["a", "b"] and all(it.open().size == (8, 8) for it in good)
    bad = [it for it in items if it not in good]
    assert [it.image_id for it in bad] == [f"m.jsonl:line{i}" for i in range(2, 2 + len(BAD_LINES))]
    for it, kind in zip(bad, BAD_LINES, strict=True):
        with pytest.raises(ImageLoadError, match=re.escape(EXPECTED[kind])):
            it.open()
