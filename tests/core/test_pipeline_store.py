"""Exactly-once JSONL store: torn writes from kill -9 are repaired, keys never duplicate."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from vlrl.core.pipeline import JsonlStore, atomic_write_json, in_shard, parse_shard, read_jsonl


def test_append_is_unique_by_key(tmp_path):
    with JsonlStore(tmp_path / "a.jsonl") as s:
        assert s.append({"id": "x", "v": 1})
        assert not s.append({"id": "x", "v": 2})
    with JsonlStore(tmp_path / "a.jsonl") as s:
        assert "x" in s and len(s) == 1
        assert [r["v"] for r in s] == [1]


def test_torn_last_line_is_dropped(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text('{"id": "a"}\n{"id": "b"}\n{"id": "c", "trunc')
    with JsonlStore(p) as s:
        assert s.keys() == {"a", "b"}
        s.append({"id": "c"})
    assert [json.loads(line)["id"] for line in p.read_text().splitlines()] == ["a", "b", "c"]


def test_kill_9_then_resume_is_exactly_once(tmp_path):
    """A real writer process is SIGKILLed mid-run; the rerun completes every key exactly once."""
    out = tmp_path / "out.jsonl"
    script = textwrap.dedent(f"""
        import time
        from vlrl.core.pipeline import JsonlStore
        s = JsonlStore({str(out)!r})
        for i in range(400):
            if str(i) in s:
                continue
            s.append({{"id": str(i), "payload": "x" * 2000}})
            time.sleep(0.002)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.time() + 60
    while time.time() < deadline and (not out.exists() or out.stat().st_size < 50_000):
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    n_before = len(out.read_text().splitlines())
    assert 0 < n_before < 400
    subprocess.run([sys.executable, "-c", script], check=True)
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert sorted(ids, key=int) == [str(i) for i in range(400)]


def test_shards_partition_keys():
    keys = [f"img{i}.png" for i in range(1000)]
    n = 4
    parts = [{k for k in keys if in_shard(k, (i, n))} for i in range(n)]
    assert set().union(*parts) == set(keys)
    assert sum(len(p) for p in parts) == len(keys)
    assert all(150 < len(p) < 350 for p in parts)
    assert parse_shard("2/4") == (2, 4) and parse_shard(None) == (0, 1)
    for bad in ("4/4", "a/b", "1"):
        with pytest.raises(ValueError, match="--shard"):
            parse_shard(bad)


def test_atomic_json_and_bad_jsonl(tmp_path):
    atomic_write_json(tmp_path / "m.json", {"a": 1})
    assert json.loads((tmp_path / "m.json").read_text()) == {"a": 1}
    p = tmp_path / "rows.jsonl"
    p.write_text('{"id": 1}\nnot json\n')
    with pytest.raises(ValueError, match=r"rows.jsonl:2: not valid JSON"):
        list(read_jsonl(p))


def test_atomic_json_failure_leaves_no_temp_file(tmp_path):
    import pytest

    from vlrl.core.pipeline import atomic_write_json

    (tmp_path / "taken").mkdir()
    with pytest.raises(IsADirectoryError):
        atomic_write_json(tmp_path / "taken", {"a": 1})
    with pytest.raises(UnicodeEncodeError):
        atomic_write_json(tmp_path / "x.json", {"name": "bad\udcffname"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_a_corrupt_middle_line_keeps_the_good_records_after_it(tmp_path):
    """One corrupted line in the middle of a part is not a torn last record: the 199 good lines
    after it used to be discarded with it (finding 13 of #24). Now it moves to NAME.corrupt."""
    import json

    from vlrl.core.pipeline import JsonlStore

    path = tmp_path / "part.jsonl"
    lines = [json.dumps({"id": f"r{i}", "caption": "ok"}) for i in range(200)]
    lines[3] = '{"id": "r3", "capt\x00ion": ###'
    path.write_text("\n".join(lines) + "\n" + '{"id": "torn", "cap')
    with JsonlStore(path) as store:
        assert len(store) == 199 and "r3" not in store and "r199" in store and "torn" not in store
        assert store.append({"id": "r3", "caption": "again"})  # the lost record is simply redone
    assert len(path.read_text().splitlines()) == 200 and path.read_text().endswith("\n")
    assert (tmp_path / "part.jsonl.corrupt").read_text().startswith('{"id": "r3", "capt')
    with JsonlStore(path) as store:  # a clean file now: nothing moved, nothing dropped
        assert len(store) == 200
