"""Every long job: one writer, an identity recorded only once work starts, pre-flight, a failure
budget, exit codes, redaction, Ctrl-C and finished-job reports (vlrl.core.jobs, wired into
`vlrl caption` and `vlrl data qa-curate`). Real processes, a real HTTP server, real kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from PIL import Image

from tests.support.fake_openai import FakeOpenAI
from tests.support.jobs import child_env, corpus
from tests.support.servers import free_port
from vlrl.core.jobs import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_USAGE,
    BackendDown,
    CircuitBreaker,
    Job,
    JobLocked,
    JobMismatch,
    OutputLock,
    exit_code,
    preflight,
    resolve_source,
    retry_quarantined,
)
from vlrl.core.redact import redact

VLRL = str(Path(sys.executable).parent / "vlrl")
KEY = "sk-test" + "abcdef0123456789XYZ"


def _caption(images, model, out, *extra, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
    cmd = [VLRL, "caption", "--images", str(images), "--model", model, "--out", str(out), "--no-progress", "--no-cache",
           "--batch-size", "2", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env or child_env(), timeout=timeout)


def _ids(out: Path) -> list[str]:
    return [json.loads(line)["image_id"] for p in sorted((out / "captions").glob("*.jsonl")) for line in p.read_text().splitlines()]


# -- units ----------------------------------------------------------------------------------------


def test_exit_codes_and_breaker():
    assert exit_code(5, 0) == EXIT_OK and exit_code(0, 3) == EXIT_FAILED and exit_code(2, 1) == EXIT_PARTIAL
    b = CircuitBreaker(3)
    b.failure("x")
    b.failure("y")
    b.success()  # a success resets the count
    b.failure("a")
    b.failure("b")
    with pytest.raises(BackendDown, match="3 consecutive.*last: c"):
        b.failure("c")
    CircuitBreaker(0).failure("never opens", n=10_000)


@pytest.mark.parametrize("text", [
    f"Incorrect API key provided: {KEY}",
    f"headers were {{'Authorization': 'Bearer {KEY}'}}",
    f"GET http://h/v1/models?api_key={KEY}&x=1",
    f'{{"api-key": "{KEY}"}}',
    "proxy http://user:hunter2@10.0.0.1:8080 refused",
])
def test_redact_hides_credentials(text):
    clean = redact(text)
    assert KEY not in clean and "hunter2" not in clean and "***" in clean


def test_redact_keeps_ordinary_text():
    for text in ("max_tokens=256 sample_tokens=4", "openai:http://127.0.0.1:8000/v1@Qwen/Qwen2.5-VL-3B-Instruct",
                 "not an image (no decoder recognises the file)", "task-classifier timed out after 60s"):
        assert redact(text) == text


def test_resolve_source_relative_and_absolute_agree(tmp_path, monkeypatch):
    (tmp_path / "imgs").mkdir()
    monkeypatch.chdir(tmp_path)
    assert resolve_source("imgs") == resolve_source(str(tmp_path / "imgs")) == str((tmp_path / "imgs").resolve())
    assert resolve_source("hf:imgs?device=cpu") == f"hf:{(tmp_path / 'imgs').resolve()}?device=cpu"
    assert resolve_source("openai:http://h/v1@m") == "openai:http://h/v1@m"


_HOLDER = """
import sys, time
from vlrl.core.jobs import OutputLock
lock = OutputLock(sys.argv[1], "test").acquire()
print("locked", flush=True)
time.sleep(600)
"""


def test_lock_refuses_a_second_writer_and_survives_kill_dash_nine(tmp_path):
    path = tmp_path / "out" / ".lock"
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path)], stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(JobLocked, match=f"pid {proc.pid}"):
            OutputLock(path, "out").acquire()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
    assert path.exists()  # the file stays, but the kernel dropped the lock with the process: not stale
    lock = OutputLock(path, "out").acquire()
    lock.release()


def test_job_identity_written_only_after_work_and_force_starts_over(tmp_path):
    out = tmp_path / "out"
    with Job("x", out, {"model": "wrong"}, outputs=["rows.jsonl"]):
        pass  # failed before any record: nothing recorded
    assert not (out / "job.json").exists()
    with Job("x", out, {"model": "right"}, outputs=["rows.jsonl"]) as job:
        (out / "rows.jsonl").write_text('{"id": 1}\n')
        job.started()
    with pytest.raises(JobMismatch, match="model: 'right' → 'other'"):
        Job("x", out, {"model": "other"}, outputs=["rows.jsonl"]).__enter__()
    with Job("x", out, {"model": "other"}, outputs=["rows.jsonl"], force=True):
        assert not (out / "rows.jsonl").exists()


def test_retry_quarantined_moves_the_file_aside(tmp_path):
    q = tmp_path / "quarantine.jsonl"
    q.write_text('{"id": "a", "reason": "x"}\n{"id": "b", "reason": "y"}\n')
    assert retry_quarantined(q) == 2 and not q.exists()
    (kept,) = tmp_path.glob("quarantine.jsonl.retried-*")
    assert "reason" in kept.read_text()


def test_retries_in_one_second_keep_every_backup(tmp_path, monkeypatch):
    """The backup is named by the wall-clock second: a second retry in that second (or after the
    clock was set back) must not overwrite the first backup (finding 13 of #24)."""
    import time

    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "20260101T000000")
    q = tmp_path / "quarantine.jsonl"
    for reason in ("first", "second", "third"):
        q.write_text(f'{{"id": "a", "reason": "{reason}"}}\n')
        assert retry_quarantined(q) == 1
    kept = sorted(p.read_text() for p in tmp_path.glob("quarantine.jsonl.retried-*"))
    assert len(kept) == 3 and all(any(r in k for k in kept) for r in ("first", "second", "third"))


# -- pre-flight -----------------------------------------------------------------------------------


def test_preflight_dead_server_wrong_model_and_missing_folder(tmp_path):
    from vlrl.core.backends import BackendError

    with pytest.raises(BackendError, match="not reachable"):
        preflight(f"openai:http://127.0.0.1:{free_port()}/v1@m")
    with FakeOpenAI("served-model") as srv:
        preflight(f"openai:{srv.base_url}@served-model")
        with pytest.raises(BackendError, match="serves no model 'other'.*served-model"):
            preflight(f"openai:{srv.base_url}@other")
        assert srv.chats == 0
    with pytest.raises(BackendError, match="does not exist"):
        preflight(f"hf:{tmp_path}/nope")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{not json")
    with pytest.raises(BackendError, match="config does not load"):
        preflight(f"hf:{tmp_path}/m")


def test_spec_with_a_credential_is_refused_and_not_echoed():
    from vlrl.core.backends import parse_spec

    for spec in (f"openai:http://h/v1@model&api_key={KEY}", f"openai:http://h/v1@model?api_key={KEY}",
                 f"openai:http://u:{KEY}@h/v1@model", f"bogus:{KEY}"):
        with pytest.raises(ValueError) as e:
            parse_spec(spec)
        assert KEY not in str(e.value)


# -- vlrl caption, end to end over HTTP ------------------------------------------------------------


def test_caption_dead_server_fails_preflight_with_one_line(tmp_path):
    imgs = corpus(tmp_path / "imgs", 3)
    res = _caption(imgs, f"openai:http://127.0.0.1:{free_port()}/v1@m?max_retries=4", tmp_path / "out")
    assert res.returncode == EXIT_USAGE and "Traceback" not in res.stderr
    assert "not reachable" in res.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_wrong_model_first_then_corrected_command_is_accepted(tmp_path):
    imgs = corpus(tmp_path / "imgs", 4)
    out = tmp_path / "out"
    with FakeOpenAI("right") as srv:
        bad = _caption(imgs, srv.spec().replace("@right", "@wrong"), out)
        assert bad.returncode == EXIT_USAGE and "serves no model 'wrong'" in bad.stderr
        # a server that fails every request: nothing committed, so no identity is left behind
        srv.fail = (500, '{"error": "boom"}')
        failed = _caption(imgs, srv.spec().replace("@right", "@right"), out, "--prompt", "Old prompt.")
        assert failed.returncode == EXIT_FAILED and not (out / "manifest.json").exists()
        srv.fail = None
        ok = _caption(imgs, srv.spec(), out)
        assert ok.returncode == EXIT_OK, ok.stderr[-2000:]
    assert sorted(_ids(out)) == [f"{i:03d}.png" for i in range(4)]


def test_relative_and_absolute_source_are_the_same_job(tmp_path):
    imgs = corpus(tmp_path / "imgs", 4)
    with FakeOpenAI() as srv:
        first = _caption("imgs", srv.spec(), "out", "--limit", "2", cwd=tmp_path)
        assert first.returncode == EXIT_OK, first.stderr[-2000:]
        second = _caption(imgs, srv.spec(), tmp_path / "out")
        assert second.returncode == EXIT_OK, second.stderr[-2000:]
    ids = _ids(tmp_path / "out")
    assert len(ids) == 4 and len(set(ids)) == 4


def test_changed_settings_refusal_shows_old_and_new_then_force(tmp_path):
    imgs = corpus(tmp_path / "imgs", 3)
    out = tmp_path / "out"
    with FakeOpenAI() as srv:
        assert _caption(imgs, srv.spec(), out, "--prompt", "Describe it.").returncode == EXIT_OK
        res = _caption(imgs, srv.spec(), out, "--prompt", "Say hi.")
        assert res.returncode == EXIT_USAGE and "'Describe it.' → 'Say hi.'" in res.stderr and "--force" in res.stderr
        forced = _caption(imgs, srv.spec(), out, "--prompt", "Say hi.", "--force")
        assert forced.returncode == EXIT_OK
    rows = [json.loads(line) for p in (out / "captions").glob("*.jsonl") for line in p.read_text().splitlines()]
    assert len(rows) == 3 and {r["prompt"] for r in rows} == {"Say hi."}


def test_circuit_breaker_stops_a_job_against_a_failing_server(tmp_path):
    imgs = corpus(tmp_path / "imgs", 30)
    with FakeOpenAI() as srv:
        srv.fail = (503, '{"error": "overloaded"}')
        res = _caption(imgs, srv.spec(), tmp_path / "out", "--max-consecutive-failures", "4")
        assert res.returncode == EXIT_FAILED and "consecutive backend failures" in res.stderr
        assert srv.chats < 30  # stopped early, not every image paying the retry budget


def test_server_error_echoing_the_key_is_redacted_everywhere(tmp_path):
    imgs = corpus(tmp_path / "imgs", 4)
    with FakeOpenAI() as srv:
        srv.fail = (400, json.dumps({"error": {"message": f"bad request; Authorization: Bearer {KEY}; key {KEY}"}}))
        res = _caption(imgs, srv.spec(), tmp_path / "out", env=child_env(OPENAI_API_KEY=KEY))
    assert res.returncode == EXIT_FAILED
    assert KEY not in res.stderr + res.stdout and "***" in res.stderr
    for p in (tmp_path / "out").rglob("*"):
        if p.is_file():
            assert KEY.encode() not in p.read_bytes(), p


def test_finished_job_is_reported_without_a_model(tmp_path):
    imgs = corpus(tmp_path / "imgs", 3, broken=1)
    with FakeOpenAI() as srv:
        spec = srv.spec()
        assert _caption(imgs, spec, tmp_path / "out").returncode == EXIT_OK
    res = _caption(imgs, spec, tmp_path / "out")  # the server is gone: nothing may need it
    assert res.returncode == EXIT_OK, res.stderr[-2000:]
    assert "total 3 captioned, 1 quarantined" in res.stdout


def test_retry_quarantined_after_the_file_is_fixed(tmp_path):
    imgs = corpus(tmp_path / "imgs", 2, broken=1)
    with FakeOpenAI() as srv:
        assert _caption(imgs, srv.spec(), tmp_path / "out").returncode == EXIT_OK
        Image.new("RGB", (8, 8), "red").save(imgs / "zz-broken0.png")
        res = _caption(imgs, srv.spec(), tmp_path / "out", "--retry-quarantined")
        assert res.returncode == EXIT_OK, res.stderr[-2000:]
    assert sorted(_ids(tmp_path / "out")) == ["000.png", "001.png", "zz-broken0.png"]


def test_huge_scan_needs_the_limit_raised_explicitly(tmp_path):
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    Image.new("L", (6000, 4000), 128).save(imgs / "scan.png")  # 24 Mpx
    with FakeOpenAI() as srv:
        res = _caption(imgs, srv.spec(), tmp_path / "a", "--max-image-pixels", "10000000")
        assert res.returncode == EXIT_OK and _ids(tmp_path / "a") == []
        assert "scan.png" in (tmp_path / "a" / "quarantine.jsonl").read_text()
        res = _caption(imgs, srv.spec(), tmp_path / "b", "--max-image-pixels", "30000000", "--resize-max-pixels", "50176")
        assert res.returncode == EXIT_OK, res.stderr[-2000:]
    (row,) = [json.loads(line) for line in next((tmp_path / "b" / "captions").glob("*.jsonl")).read_text().splitlines()]
    assert row["width"] * row["height"] <= 50176


def _wait_for(pred, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_second_writer_is_refused_and_kill_dash_nine_then_rerun_is_exactly_once(tmp_path):
    imgs = corpus(tmp_path / "imgs", 40)
    out = tmp_path / "out"
    with FakeOpenAI(delay=0.15) as srv:
        cmd = [VLRL, "caption", "--images", str(imgs), "--model", srv.spec(), "--out", str(out), "--no-progress",
               "--batch-size", "2", "--part-size", "7"]
        first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=child_env())
        try:
            assert _wait_for(lambda: len(_ids(out)) >= 4 if (out / "captions").exists() else False)
            second = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=120)
            assert second.returncode == EXIT_USAGE and f"already being written by pid {first.pid}" in second.stderr
            os.kill(first.pid, signal.SIGKILL)
            first.wait()
        finally:
            first.kill()
        assert 0 < len(_ids(out)) < 40
        done = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=300)
        assert done.returncode == EXIT_OK, done.stderr[-2000:]
    ids = _ids(out)
    assert len(ids) == 40 and len(set(ids)) == 40
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"


def test_ctrl_c_says_where_the_job_stopped(tmp_path):
    imgs = corpus(tmp_path / "imgs", 40)
    out = tmp_path / "out"
    # The server answers four requests, then holds every further one until the test has sent the
    # interrupt: the job cannot finish first, however loaded the machine (a timing window could).
    gate = threading.Event()

    def reply(body: dict) -> str:
        if srv.chats > 4:
            gate.wait(60)
        return "a caption " + str(srv.chats)

    # A shell that starts a job in the background (``make test &``, CI runners) leaves SIGINT
    # ignored, and an ignored signal stays ignored across exec: Python would then never raise
    # KeyboardInterrupt. Restore the default before exec'ing the CLI, as a terminal would have it.
    sigint_default = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
    with FakeOpenAI(reply=reply) as srv:
        proc = subprocess.Popen([sys.executable, "-c", sigint_default, VLRL, "caption", "--images", str(imgs),
                                 "--model", srv.spec(concurrency="1"), "--out", str(out), "--no-progress", "--batch-size", "2"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
        try:
            assert _wait_for(lambda: (out / "captions").exists() and len(_ids(out)) >= 2)
            proc.send_signal(signal.SIGINT)
        finally:
            gate.set()
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "rerun the same command to resume" in err and str(out) in err
    assert 2 <= len(_ids(out)) < 40


# -- qa-curate ------------------------------------------------------------------------------------


def test_qa_curate_identity_lock_and_empty_dataset_exit(tmp_path):
    imgs = corpus(tmp_path / "imgs", 3)
    out = tmp_path / "qa"
    with FakeOpenAI() as srv:  # answers never hold a question: nothing can be kept, and the run says so
        base = [VLRL, "data", "qa-curate", "--images", str(imgs), "--vlm", srv.spec(), "--answerer", srv.spec(),
                "--out", str(out), "-q"]
        res = subprocess.run(base, capture_output=True, text=True, env=child_env(), timeout=300)
        # an image whose reply held no question is asked again by the next run (until --max-attempts)
        assert res.returncode == EXIT_FAILED and "dataset not written" in res.stderr and "rerun" in res.stderr
        # a folder where nothing has been kept holds no job yet: other settings are not refused
        other = subprocess.run([*base, "--visual-min", "0.5"], capture_output=True, text=True, env=child_env(), timeout=300)
        assert other.returncode == EXIT_FAILED and "different job" not in other.stderr
    dead = subprocess.run([VLRL, "data", "qa-curate", "--images", str(imgs), "--vlm", f"openai:http://127.0.0.1:{free_port()}/v1@m",
                           "--answerer", "hf:/no/such", "--out", str(tmp_path / "qa2"), "-q"],
                          capture_output=True, text=True, env=child_env(), timeout=300)
    assert dead.returncode == EXIT_USAGE and "not reachable" in dead.stderr and not (tmp_path / "qa2" / "job.json").exists()


# -- the other long jobs run through the same Job -------------------------------------------------


def test_teacher_captions_identity_breaker_and_dead_committee(tmp_path):
    imgs = corpus(tmp_path / "imgs", 6)
    out = tmp_path / "t"

    def run(*args):
        return subprocess.run([VLRL, "data", "teacher-captions", "--images", str(imgs), "--out", str(out), *args],
                              capture_output=True, text=True, env=child_env(), timeout=300)

    dead = f"openai:http://127.0.0.1:{free_port()}/v1@m"
    res = run("--teacher", f"a={dead}")  # the whole committee is unreachable: one line, nothing written
    assert res.returncode == EXIT_USAGE and "not reachable" in res.stderr and not (out / "job.json").exists()
    with FakeOpenAI() as srv:
        srv.fail = (503, f'{{"error": "down, key {KEY}"}}')
        res = run("--teacher", f"a={srv.spec()}", "--max-consecutive-failures", "3", "--batch-size", "1")
        assert res.returncode == EXIT_FAILED and "consecutive backend failures" in res.stderr and KEY not in res.stderr
        assert srv.chats < 6
        srv.fail = None
        assert run("--teacher", f"a={srv.spec()}").returncode == EXIT_OK
        res = run("--teacher", f"a={srv.spec()}", "--max-tokens", "9")
        assert res.returncode == EXIT_USAGE and "max_tokens: 512 → 9" in res.stderr
    for p in out.rglob("*.jsonl"):
        assert KEY not in p.read_text()


def test_prism_dead_answerer_fails_preflight(tmp_path):
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"image": "x.png", "question": "q?", "answer": "a"}) + "\n")
    with FakeOpenAI() as srv:
        res = subprocess.run([VLRL, "eval", "prism", "--captioner", srv.spec(), "--answerer",
                              f"openai:http://127.0.0.1:{free_port()}/v1@m", "--bench", str(bench), "--out", str(tmp_path / "p")],
                             capture_output=True, text=True, env=child_env(), timeout=300)
        assert srv.chats == 0
    assert res.returncode == EXIT_USAGE and "not reachable" in res.stderr.strip().splitlines()[-1]


def test_reward_score_and_reasoning_eval_preflight_their_backends(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "a", "completion": "A red bus.", "questions": []}) + "\n")
    dead = f"openai:http://127.0.0.1:{free_port()}/v1@m"
    res = subprocess.run([VLRL, "reward", "score", "--reward", "caprl_qa", "--input", str(rows), "--out", str(tmp_path / "s.jsonl"),
                          "--answerer", dead], capture_output=True, text=True, env=child_env(), timeout=300)
    assert res.returncode == EXIT_USAGE and "not reachable" in res.stderr and not (tmp_path / "s.jsonl").exists()
    res = subprocess.run([VLRL, "eval", "reasoning", "--model", dead, "--bench", "builtin:tiny_math", "--out", str(tmp_path / "r")],
                         capture_output=True, text=True, env=child_env(), timeout=300)
    assert res.returncode == EXIT_USAGE and "not reachable" in res.stderr


FULL = {"caption": "caption", "qa-curate": "data qa-curate", "teacher-captions": "data teacher-captions"}


@pytest.mark.parametrize("first, second", [("caption", "teacher-captions"), ("qa-curate", "caption"),
                                           ("caption", "qa-curate"), ("teacher-captions", "caption-qa")])
def test_another_commands_out_is_refused_naming_that_command(tmp_path, first, second):
    """Two different commands into one ``--out`` mix their files in one folder (``load_dataset(OUT)``
    reads both; ``teacher-captions`` crashed on ``eval caption-qa``'s ``captions.jsonl``). The second
    is refused (exit 2) with one line naming the command whose work the folder holds, even with
    ``--force``, which would clear only the second command's own files."""
    from tests.support.long_commands import COMMANDS, run

    srv = FakeOpenAI(reply=__import__("tests.support.long_commands", fromlist=["answer"]).answer)
    with srv:
        first_argv = COMMANDS[first](tmp_path / "a", srv.spec())
        out = first_argv[first_argv.index("--out") + 1]
        assert run(first_argv, OPENAI_API_KEY="EMPTY").returncode == 0
        before = sorted(p.relative_to(out) for p in Path(out).rglob("*"))
        second_argv = COMMANDS[second](tmp_path / "b", srv.spec())
        second_argv[second_argv.index("--out") + 1] = out
        for extra in ([], ["--force"]):
            res = run([*second_argv, *extra], OPENAI_API_KEY="EMPTY")
            assert res.returncode == EXIT_USAGE, res.stderr[-2000:]
            assert "Traceback" not in res.stderr and f"vlrl {FULL[first]}" in res.stderr
    assert sorted(p.relative_to(out) for p in Path(out).rglob("*")) == before  # nothing of the second was written
