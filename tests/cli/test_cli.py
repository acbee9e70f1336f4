"""The console script and the ``train/*.py`` entry scripts are one CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

VLRL = str(Path(sys.executable).parent / "vlrl")
SCRIPTS = sorted((ROOT / "train").glob("*.py"))


def test_help_lists_every_group():
    out = subprocess.run([VLRL, "--help"], capture_output=True, text=True, check=True).stdout
    for group in ("models", "data", "reward", "train", "eval", "caption", "bench", "demo", "serve"):
        assert group in out


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_entry_script_takes_the_flags_of_vlrl_train(script):
    res = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    # train/*.py parse the option table of `vlrl train <method>` and run the same dispatch
    cli = subprocess.run([VLRL, "train", script.stem, "--help"], capture_output=True, text=True, check=True).stdout
    for flag in ("--recipe", "--force", *(("--no-resume",) if script.stem != "sft" else ())):
        assert flag in res.stdout and flag in cli, flag


def test_bad_backend_spec_is_one_clear_line(tmp_path):
    (tmp_path / "rows.jsonl").write_text('{"id": "a", "completion": "x", "questions": []}\n')
    res = subprocess.run(
        [VLRL, "reward", "score", "--reward", "caprl_qa", "--input", str(tmp_path / "rows.jsonl"),
         "--out", str(tmp_path / "s.jsonl"), "-s", "answerer=grpc:nowhere"],
        capture_output=True, text=True,
    )
    assert res.returncode != 0
    assert "unknown kind 'grpc'" in res.stderr + res.stdout


def test_missing_local_model_is_one_clear_line_not_a_traceback(tmp_path):
    from PIL import Image

    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "imgs" / "a.png")
    res = subprocess.run(
        [VLRL, "data", "qa-curate", "--images", str(tmp_path / "imgs"), "--vlm", f"hf:{tmp_path}/no-model",
         "--answerer", f"hf:{tmp_path}/no-model", "--out", str(tmp_path / "out"), "-q"],
        capture_output=True, text=True,
    )
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert "no-model' does not exist" in res.stderr.strip().splitlines()[-1]


def test_http_client_request_logs_are_silenced():
    import logging

    from typer.testing import CliRunner

    from vlrl.cli import app

    CliRunner().invoke(app, ["models", "--help"])  # runs the root callback that configures logging
    assert logging.getLogger("httpx2").level >= logging.WARNING  # openai 3 logs every request through httpx2
