"""The one stage loop (vlrl.core.stage.run_stage): exactly once, quarantine, batches, the job."""

from __future__ import annotations

import json

import pytest

from vlrl.core.jobs import BackendDown, Job
from vlrl.core.pipeline import JsonlStore, Quarantine
from vlrl.core.stage import Outcome, run_stage


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _echo(calls):
    def process(batch):
        calls.append(list(batch))
        return [Outcome.ok(x, {"id": x, "value": x.upper()}) for x in batch]

    return process


class _Killed(JsonlStore):
    """A store whose process dies (KeyboardInterrupt stands in for kill) at the n-th append."""

    def __init__(self, path, die_at):
        super().__init__(path)
        self.die_at = die_at
        self.appends = 0

    def append(self, record):
        self.appends += 1
        if self.appends == self.die_at:
            raise KeyboardInterrupt
        return super().append(record)


def test_a_run_killed_mid_batch_resumes_and_writes_every_record_exactly_once(tmp_path):
    keys = [f"k{i}" for i in range(10)]
    calls: list[list[str]] = []
    store = _Killed(tmp_path / "out.jsonl", die_at=6)  # in the middle of the second batch of 4
    with pytest.raises(KeyboardInterrupt):
        run_stage(keys, key=str, process=_echo(calls), store=store, batch_size=4, progress=False)
    store.close()
    first = [r["id"] for r in _lines(tmp_path / "out.jsonl")]
    assert first == keys[:5]

    calls.clear()
    with JsonlStore(tmp_path / "out.jsonl") as store:
        counts = run_stage(keys, key=str, process=_echo(calls), store=store, batch_size=4, progress=False)
    assert sorted(x for b in calls for x in b) == keys[5:]  # the committed ones are never redone
    got = [r["id"] for r in _lines(tmp_path / "out.jsonl")]
    assert sorted(got) == sorted(keys) and len(got) == len(set(got))
    assert (counts.stored, counts.skipped, counts.failed) == (5, 5, 0)


def test_an_interrupted_process_call_commits_nothing_of_its_batch_and_the_rerun_redoes_it(tmp_path):
    keys = [f"k{i}" for i in range(6)]

    def dies_on_second_batch(batch):
        if "k3" in batch:
            raise KeyboardInterrupt
        return [Outcome.ok(x, {"id": x}) for x in batch]

    with JsonlStore(tmp_path / "o.jsonl") as store, pytest.raises(KeyboardInterrupt):
        run_stage(keys, key=str, process=dies_on_second_batch, store=store, batch_size=3, progress=False)
    assert [r["id"] for r in _lines(tmp_path / "o.jsonl")] == keys[:3]
    calls: list[list[str]] = []
    with JsonlStore(tmp_path / "o.jsonl") as store:
        run_stage(keys, key=str, process=_echo(calls), store=store, batch_size=3, progress=False)
    assert calls == [keys[3:]]
    assert sorted(r["id"] for r in _lines(tmp_path / "o.jsonl")) == keys


def test_a_process_that_raises_for_one_item_quarantines_that_item_only(tmp_path):
    keys = ["a", "b", "bad", "c", "d"]
    seen: list[list[str]] = []

    def process(batch):
        seen.append(list(batch))
        if "bad" in batch:
            raise ValueError("cannot read bad\nsecond line")
        return [Outcome.ok(x, {"id": x}) for x in batch]

    with JsonlStore(tmp_path / "o.jsonl") as store, Quarantine(tmp_path / "q.jsonl") as q:
        counts = run_stage(keys, key=str, process=process, store=store, quarantine=q, batch_size=5, progress=False)
    assert sorted(r["id"] for r in _lines(tmp_path / "o.jsonl")) == ["a", "b", "c", "d"]
    assert _lines(tmp_path / "q.jsonl") == [{"id": "bad", "reason": "ValueError: cannot read bad"}]
    assert (counts.stored, counts.failed, counts.quarantined) == (4, 0, 1)
    assert seen[0] == keys and ["bad"] in seen  # the batch was split, the bad item tried alone


def test_keys_already_stored_are_skipped_before_process_sees_them(tmp_path):
    with JsonlStore(tmp_path / "o.jsonl") as store:
        store.append({"id": "b", "value": "old"})
    extra = JsonlStore(tmp_path / "solved.jsonl")
    extra.append({"id": "c"})
    calls: list[list[str]] = []
    with JsonlStore(tmp_path / "o.jsonl") as store:
        counts = run_stage(["a", "b", "c", "a"], key=str, process=_echo(calls), store=store, done=[extra],
                           progress=False)
    extra.close()
    assert calls == [["a"]] and counts.skipped == 2 and counts.stored == 1
    assert {r["id"]: r["value"] for r in _lines(tmp_path / "o.jsonl")} == {"b": "old", "a": "A"}


def test_quarantined_keys_are_retried_only_when_asked(tmp_path):
    broken = {"x"}

    def process(batch):
        return [Outcome.fail(k, f"{k} is broken", note=1) if k in broken else Outcome.ok(k, {"id": k}) for k in batch]

    def run(**kw):
        calls: list[str] = []

        def counting(batch):
            calls.extend(batch)
            return process(batch)

        with JsonlStore(tmp_path / "o.jsonl") as s, JsonlStore(tmp_path / "q.jsonl") as q:
            run_stage(["x", "y"], key=str, process=counting, store=s, quarantine=q, progress=False, **kw)
        return calls

    assert run() == ["x", "y"]
    assert _lines(tmp_path / "q.jsonl") == [{"id": "x", "note": 1, "reason": "x is broken"}]
    assert run() == []  # quarantined: not retried
    broken.clear()
    assert run(retry_quarantined=True) == ["x"]
    assert sorted(r["id"] for r in _lines(tmp_path / "o.jsonl")) == ["x", "y"]


def test_a_failure_without_quarantine_is_one_log_line_and_retried_next_run(tmp_path, caplog):
    def fails(batch):
        return [Outcome.fail(k, "server said no", label=f"image {k}") for k in batch]

    with JsonlStore(tmp_path / "o.jsonl") as s, caplog.at_level("WARNING"):
        counts = run_stage(["1", "2"], key=str, process=fails, store=s, desc="judge", progress=False)
        again = run_stage(["1", "2"], key=str, process=fails, store=s, desc="judge", progress=False)
    lines = [r.getMessage() for r in caplog.records]
    assert lines.count("judge: image 1: server said no") == 2
    assert (counts.failed, counts.quarantined, again.failed) == (2, 0, 2)
    caplog.clear()
    with JsonlStore(tmp_path / "o.jsonl") as s, caplog.at_level("WARNING"):
        run_stage(["1"], key=str, process=fails, store=s, failure_log=None, progress=False)  # process logged it
    assert not caplog.records


def test_an_item_the_process_forgot_is_a_failure_not_a_silent_gap(tmp_path):
    with JsonlStore(tmp_path / "o.jsonl") as s, JsonlStore(tmp_path / "q.jsonl") as q:
        counts = run_stage(["a", "b"], key=str, process=lambda b: [Outcome.ok("a", {"id": "a"})], store=s,
                           quarantine=q, progress=False)
    assert counts.quarantined == 1 and "no outcome" in _lines(tmp_path / "q.jsonl")[0]["reason"]


def test_the_jobs_breaker_stops_a_stage_whose_items_all_raise(tmp_path):
    calls: list[str] = []

    def always_raises(batch):
        calls.extend(batch)
        raise ConnectionError("refused")

    job = Job("test", tmp_path, {"a": 1}, max_consecutive_failures=3)
    with pytest.raises(BackendDown), job, JsonlStore(tmp_path / "o.jsonl") as s, JsonlStore(tmp_path / "q.jsonl") as q:
        run_stage([str(i) for i in range(20)], key=str, process=always_raises, store=s, quarantine=q,
                  batch_size=2, progress=False)
    assert len(calls) < 20  # it stopped: the remaining items were never sent
    assert job.quarantined == len(_lines(tmp_path / "q.jsonl")) < 20


def test_a_job_that_does_not_observe_gets_the_counts_and_its_identity(tmp_path):
    job = Job("test", tmp_path, {"a": 1})
    with job, JsonlStore(tmp_path / "o.jsonl") as s, JsonlStore(tmp_path / "q.jsonl") as q:
        run_stage(["a", "b", "c"], key=str, store=s, quarantine=q, progress=False,
                  process=lambda b: [Outcome.fail(k, "no") if k == "b" else Outcome.ok(k, {"id": k}) for k in b])
    assert (job.done, job.quarantined, job.failed) == (2, 1, 0)
    assert json.loads((tmp_path / "job.json").read_text())["job"] == {"a": 1}


def test_an_outcome_may_go_to_another_store_even_an_empty_one(tmp_path):
    with JsonlStore(tmp_path / "o.jsonl") as s, JsonlStore(tmp_path / "solved.jsonl") as solved:
        run_stage(["a", "b"], key=str, store=s, done=[solved], progress=False,
                  process=lambda b: [Outcome.ok(k, {"id": k}, to=solved if k == "b" else None) for k in b])
        calls: list[list[str]] = []
        run_stage(["a", "b"], key=str, store=s, done=[solved], progress=False, process=_echo(calls))
    assert [r["id"] for r in _lines(tmp_path / "o.jsonl")] == ["a"]
    assert [r["id"] for r in _lines(tmp_path / "solved.jsonl")] == ["b"] and calls == []


def test_a_backend_failure_is_never_written_and_is_retried_by_the_next_run(tmp_path):
    down = {"b"}

    def process(batch):
        return [Outcome.retry(k, "connection refused") if k in down else Outcome.ok(k, {"id": k}) for k in batch]

    for _ in range(2):
        with JsonlStore(tmp_path / "o.jsonl") as s, Quarantine(tmp_path / "q.jsonl") as q:
            counts = run_stage(["a", "b"], key=str, process=process, store=s, quarantine=q, progress=False)
        assert counts.failed == 1 and counts.quarantined == 0
        assert not (tmp_path / "q.jsonl").read_text()
    down.clear()
    with JsonlStore(tmp_path / "o.jsonl") as s, Quarantine(tmp_path / "q.jsonl") as q:
        assert run_stage(["a", "b"], key=str, process=process, store=s, quarantine=q, progress=False).stored == 1
    assert sorted(r["id"] for r in _lines(tmp_path / "o.jsonl")) == ["a", "b"]


def test_all_failed_batches_open_the_breaker_of_a_job_that_does_not_observe(tmp_path):
    sent: list[str] = []

    def process(batch):
        sent.extend(batch)
        return [Outcome.ok(k, {"id": k}) if k == "0" else Outcome.retry(k, "HTTP 503") for k in batch]

    job = Job("test", tmp_path, {"a": 1}, max_consecutive_failures=3)
    with pytest.raises(BackendDown, match="HTTP 503"), job, JsonlStore(tmp_path / "o.jsonl") as s:
        run_stage([str(i) for i in range(12)], key=str, process=process, store=s, batch_size=2, progress=False)
    # batch 1 stored "0" (the backend is up: "1" does not count), batches 2 and 3 failed whole: 4 >= 3
    assert sent == ["0", "1", "2", "3", "4", "5"]  # stopped before the fourth batch was sent
    assert [r["id"] for r in _lines(tmp_path / "o.jsonl")] == ["0"] and job.failed == 5


def test_stable_batches_resend_a_half_done_batch_with_its_first_run_boundaries(tmp_path):
    keys = [f"k{i}" for i in range(7)]
    with JsonlStore(tmp_path / "o.jsonl") as s:
        for k in ("k1", "k4", "k5"):
            s.append({"id": k})
    calls: list[list[str]] = []
    with JsonlStore(tmp_path / "o.jsonl") as s:
        counts = run_stage(keys, key=str, process=_echo(calls), store=s, batch_size=3, stable_batches=True,
                           progress=False)
    assert calls == [["k0", "k2"], ["k3"], ["k6"]] and counts.skipped == 3
    calls.clear()
    with JsonlStore(tmp_path / "p.jsonl") as s:
        s.append({"id": "k1"})
        run_stage(keys, key=str, process=_echo(calls), store=s, batch_size=3, progress=False)
    assert calls == [["k0", "k2", "k3"], ["k4", "k5", "k6"]]  # the default packs full batches


def test_done_may_be_any_container_of_keys(tmp_path):
    calls: list[list[str]] = []
    with JsonlStore(tmp_path / "o.jsonl") as s:
        run_stage(["a", "b"], key=str, process=_echo(calls), store=s, done=[{"a"}], progress=False)
    assert calls == [["b"]]


def test_a_batch_is_committed_before_the_breaker_stops_the_job(tmp_path):
    def process(batch):
        if any(k.startswith("bad") for k in batch):
            raise RuntimeError("decoder crashed")
        return [Outcome.ok(k, {"id": k}) for k in batch]

    job = Job("test", tmp_path, {"a": 1}, max_consecutive_failures=2)
    with pytest.raises(BackendDown), job, JsonlStore(tmp_path / "o.jsonl") as s, JsonlStore(tmp_path / "q.jsonl") as q:
        run_stage(["a", "bad1", "bad2", "bad3", "b"], key=str, process=process, store=s, quarantine=q,
                  batch_size=4, progress=False)
    assert [r["id"] for r in _lines(tmp_path / "o.jsonl")] == ["a"]  # its good item was not lost
    assert [r["id"] for r in _lines(tmp_path / "q.jsonl")] == ["bad1", "bad2", "bad3"]
