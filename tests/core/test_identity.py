"""The one run-identity mechanism (vlrl.core.identity): what is stored stays what it was, so old
run folders resume unchanged."""

from __future__ import annotations

import hashlib
import json

import pytest

from vlrl.core import identity, jobs
from vlrl.core.identity import JobMismatch, check_identity, digest, flatten, read_identity, without_keys


def test_jobs_keeps_offering_the_identity_names():
    for name in ("resolve_source", "backend_identity", "job_settings", "check_identity", "identity_changes",
                 "JobMismatch", "SETTINGS_IGNORED"):
        assert getattr(jobs, name) is getattr(identity, name)


def test_digest_is_the_hash_demo_markers_already_hold():
    cfg = {"seed": 0, "quick": False, "steps": 60, "path": None}
    old = hashlib.sha1(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:12]
    assert digest(cfg) == old and len(digest(cfg, 10)) == 10


def test_read_identity_missing_unreadable_and_blocks(tmp_path, caplog):
    assert read_identity(tmp_path / "none.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    assert read_identity(tmp_path / "bad.json") is None and "unreadable" in caplog.text
    (tmp_path / "job.json").write_text(json.dumps({"command": "vlrl x", "job": {"a": 1}}))
    assert read_identity(tmp_path / "job.json", "job") == {"a": 1}
    assert read_identity(tmp_path / "job.json", "other") is None


def test_flat_identities_and_refusals():
    flat = flatten({"trainer": {"lr": 1e-5, "output_dir": "o"}, "callbacks": {}})
    assert flat == {"trainer.lr": 1e-5, "trainer.output_dir": "o", "callbacks": {}}
    assert without_keys(flat, ("trainer.output_dir", "callbacks")) == {"trainer.lr": 1e-5}
    assert without_keys(flat, ("trainer.",)) == {"callbacks": {}}
    check_identity(None, {"a": 1}, where="out")
    with pytest.raises(JobMismatch, match="a: 1 → 2"):
        check_identity({"a": 1}, {"a": 2}, where="out")


def test_spec_options_that_change_outputs_are_the_identity_run_only_ones_are_not(tmp_path):
    from vlrl.core.backends import spec_identity

    model = tmp_path / "model"
    model.mkdir()
    rs = identity.resolve_source
    # a py: factory's options are all kept (vlrl cannot know what the code does with them), sorted
    assert rs("py:mod:fn?terse=1&b=2") == rs("py:mod:fn?b=2&terse=1") == "py:mod:fn?b=2&terse=1"
    assert rs("py:mod:fn?terse=1") != rs("py:mod:fn?terse=0") != rs("py:mod:fn")
    # hf: dtype/device kept with the folder resolved; the generate batch is how, not what
    assert rs(f"hf:{model}?dtype=float32&batch_size=4") == f"hf:{model.resolve()}?dtype=float32"
    assert rs(f"hf:{model}?batch_size=4") == f"hf:{model.resolve()}"
    # openai: timeouts, concurrency and retries dropped; how choices are read kept
    url = "openai:http://127.0.0.1:8000/v1@Qwen/Q"
    assert rs(f"{url}?concurrency=64&timeout=5&max_retries=1") == url
    assert rs(f"{url}?logprobs=off&concurrency=4") == f"{url}?logprobs=off"
    # NAME=SPEC (committee members), and lists of them
    assert rs([f"t1={url}?timeout=9", "t2=py:mod:fn?x=1"]) == [f"t1={url}", "t2=py:mod:fn?x=1"]
    # idempotent: a stored identity normalises to itself
    assert spec_identity(spec_identity(f"{url}?prefix_mode=user&timeout=3")) == f"{url}?prefix_mode=user"
    # not the working directory's business (a py: spec with '?' once became an absolute path)
    assert not rs("py:mod:fn?x=1").startswith("/")


def test_a_rerun_with_other_spec_options_is_refused_old_ones_still_resume():
    url = "openai:http://127.0.0.1:8000/v1@Q"
    stored = jobs.job_settings({"vlm": "py:mod:fn?terse=1", "answerer": f"{url}?concurrency=16&logprobs=off"})
    with pytest.raises(JobMismatch, match=r"vlm: 'py:mod:fn\?terse=1' → 'py:mod:fn\?terse=0'"):
        check_identity(stored, jobs.job_settings({"vlm": "py:mod:fn?terse=0", "answerer": f"{url}?logprobs=off"}), where="out")
    # another concurrency is the same job
    check_identity(stored, jobs.job_settings({"vlm": "py:mod:fn?terse=1", "answerer": f"{url}?logprobs=off&concurrency=2"}),
                   where="out")
    # a folder whose identity was stored with the run-only options in it (older vlrl) resumes
    check_identity({"answerer": f"{url}?timeout=60&logprobs=off"}, {"answerer": f"{url}?logprobs=off"}, where="out")
