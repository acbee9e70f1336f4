"""The console script and the thin entry scripts are one CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VLRL = str(Path(sys.executable).parent / "vlrl")
SCRIPTS = sorted(p for d in ("data_pipelines", "train", "eval") for p in (ROOT / d).glob("*.py"))


def test_help_lists_every_group():
    out = subprocess.run([VLRL, "--help"], capture_output=True, text=True, check=True).stdout
    for group in ("models", "data", "reward", "train", "eval", "caption", "bench", "demo"):
        assert group in out


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_entry_script_is_the_vlrl_command(script):
    res = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "Usage: vlrl " in res.stdout


def test_bad_backend_spec_is_one_clear_line(tmp_path):
    (tmp_path / "rows.jsonl").write_text('{"id": "a", "completion": "x", "questions": []}\n')
    res = subprocess.run(
        [VLRL, "reward", "score", "--reward", "caprl_qa", "--input", str(tmp_path / "rows.jsonl"),
         "--out", str(tmp_path / "s.jsonl"), "-s", "answerer=grpc:nowhere"],
        capture_output=True, text=True,
    )
    assert res.returncode != 0
    assert "unknown kind 'grpc'" in res.stderr + res.stdout
