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
