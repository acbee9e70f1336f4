"""One command's output is the next one's input: `vlrl caption` → `vlrl reward guard` / `reward score`,
without reshaping; and a malformed row is one bad row with a reason, never the end of a file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_openai import FakeOpenAI
from tests.support.jobs import child_env, corpus
from tests.support.paths import FIXTURES, ROOT
from vlrl.rewards.guards import GuardSet
from vlrl.rewards.scoring import guard_rows_file, iter_rows

VLRL = str(Path(sys.executable).parent / "vlrl")


def test_caption_output_feeds_guard_and_score_as_is(tmp_path):
    imgs = corpus(tmp_path / "imgs", 5)
    out = tmp_path / "caps"
    with FakeOpenAI() as srv:
        res = subprocess.run([VLRL, "caption", "--images", str(imgs), "--model", srv.spec(), "--out", str(out), "--no-progress"],
                             capture_output=True, text=True, env=child_env(), timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    (part,) = (out / "captions").glob("*.jsonl")
    captions = {json.loads(line)["image_id"]: json.loads(line)["caption"] for line in part.read_text().splitlines()}

    guard = subprocess.run([VLRL, "reward", "guard", "--input", str(part), "--json", str(tmp_path / "g.json")],
                           capture_output=True, text=True, env=child_env(), timeout=300)
    assert guard.returncode == 0, guard.stderr[-2000:]
    report = json.loads((tmp_path / "g.json").read_text())
    assert report["summary"]["rows"] == 5 and report["summary"]["errors"] == []
    assert {r["image_id"]: r["caption"] for r in report["results"]} == captions
    assert all(r["id"] == r["image_id"] for r in report["results"])

    score = subprocess.run([VLRL, "reward", "score", "--reward", "guards", "--input", str(part), "--out", str(tmp_path / "s.jsonl")],
                           capture_output=True, text=True, env=child_env(), timeout=300)
    assert score.returncode == 0, score.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert len(rows) == 5 and all(r["reward"] is not None for r in rows)
    assert {r["image_id"]: r["caption"] for r in rows} == captions
    assert all(Path(r["image"]).is_file() for r in rows)  # the image reference travels with the row


def test_reward_notebook_runs_headless_on_real_command_output(tmp_path):
    """The documented way (docs/notebooks.md): nbconvert --execute --output-dir, never over the source."""
    pytest.importorskip("nbconvert")
    imgs = corpus(tmp_path / "imgs", 4)
    with FakeOpenAI() as srv:
        assert subprocess.run([VLRL, "caption", "--images", str(imgs), "--model", srv.spec(), "--out", str(tmp_path / "caps"),
                               "--no-progress"], capture_output=True, env=child_env(), timeout=300).returncode == 0
    (part,) = (tmp_path / "caps" / "captions").glob("*.jsonl")
    scored = tmp_path / "scored.jsonl"
    assert subprocess.run([VLRL, "reward", "score", "--reward", "guards", "--input", str(part), "--out", str(scored)],
                          capture_output=True, env=child_env(), timeout=300).returncode == 0
    nb = ROOT / "notebooks" / "reward_diagnostics.ipynb"
    before = nb.read_bytes()
    res = subprocess.run([str(Path(sys.executable).parent / "jupyter"), "nbconvert", "--to", "notebook", "--execute",
                          "--output-dir", str(tmp_path / "nb"), str(nb)],
                         capture_output=True, text=True, env=child_env(VLRL_NB_SCORED=str(scored)), timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert nb.read_bytes() == before
    ran = json.loads((tmp_path / "nb" / "reward_diagnostics.ipynb").read_text())
    outputs = [o for c in ran["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert "000.png" in json.dumps(outputs)  # it read the real rows, not the fixture


def test_every_row_failing_exits_non_zero_and_columns_can_be_named(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"key": f"k{i}", "txt": "A red bus at a stop."}) + "\n" for i in range(3)))
    res = subprocess.run([VLRL, "reward", "guard", "--input", str(rows), "--json", str(tmp_path / "g.json")],
                         capture_output=True, text=True, env=child_env(), timeout=300)
    assert res.returncode == 1 and "every row was bad" in res.stderr
    res = subprocess.run([VLRL, "reward", "score", "--reward", "guards", "--input", str(rows), "--out", str(tmp_path / "s.jsonl")],
                         capture_output=True, text=True, env=child_env(), timeout=300)
    assert res.returncode == 1 and "no row could be scored" in res.stderr
    res = subprocess.run([VLRL, "reward", "score", "--reward", "guards", "--input", str(rows), "--out", str(tmp_path / "s.jsonl"),
                          "--id-column", "key", "--text-column", "txt"], capture_output=True, text=True, env=child_env(), timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    out = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [r["id"] for r in out] == ["k0", "k1", "k2"] and all(r["txt"] == "A red bus at a stop." for r in out)


def test_malformed_lines_are_bad_rows_not_a_crash(tmp_path):
    good = json.dumps({"id": "ok", "caption": "A cat on a mat."}).encode()
    lines = [
        good,
        b'{"id": "utf8", "caption": "caf\xe9"}',                      # invalid UTF-8
        b'{"id": "\\ud800", "caption": "lone surrogate in the id"}',  # a lone surrogate
        json.dumps({"id": "num", "caption": 42}).encode(),            # a non-string text
        b"[" * 100_000 + b"]" * 100_000,                               # 100k-deep JSON
        json.dumps({"id": "noimg"}).encode(),                         # no text column
        json.dumps({"id": "ok2", "completion": "A dog."}).encode(),
    ]
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    errors = {ln: err for ln, _, err in iter_rows(path, "caption", ("completion",)) if err}
    assert set(errors) == {2, 3, 5, 6}
    assert "UTF-8" in errors[2] and "surrogate" in errors[3] and "deep" in errors[5] and "missing" in errors[6]
    report = guard_rows_file(GuardSet.from_settings(), path)
    assert [r["id"] for r in report["results"]] == ["ok", "ok2"]
    assert {e["line"] for e in report["summary"]["errors"]} == {2, 3, 4, 5, 6}
    assert "must be a string" in next(e["error"] for e in report["summary"]["errors"] if e["line"] == 4)


def test_notebook_fixture_holds_only_what_the_real_score_command_writes(tmp_path):
    """The reward-diagnostics fixture must look like real `vlrl reward score` output: feed its own
    input columns to the real command and compare the keys."""
    fixture = FIXTURES / "notebooks" / "scored.jsonl"
    rows = [json.loads(line) for line in fixture.read_text().splitlines() if line.strip()]
    inputs = tmp_path / "rows.jsonl"
    inputs.write_text("".join(json.dumps({k: r[k] for k in ("id", "image_id", "image", "completion") if k in r}) + "\n" for r in rows))
    out = tmp_path / "scored.jsonl"
    res = subprocess.run([VLRL, "reward", "score", "--reward", "guards", "--input", str(inputs), "--out", str(out)],
                         capture_output=True, text=True, env=child_env(), timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    real = [json.loads(line) for line in out.read_text().splitlines()]
    for fx, got in zip(rows, real, strict=True):
        assert set(fx) <= set(got), f"the fixture holds {sorted(set(fx) - set(got))}, which the command never writes"
        carried = [k for k in ("id", "image_id", "image", "completion") if k in fx]
        assert {k: fx[k] for k in carried} == {k: got[k] for k in carried}


def test_ids_chain_from_caption_through_qa_curate_to_caption_qa(tmp_path):
    """One manifest with ``image_id``: `caption` keyed on it while `qa-curate` keyed on the path,
    so `eval caption-qa --captions` matched 0 of 20 and exited 0 (finding 8 of #24)."""
    from tests.support.long_commands import FAIL_FAST, answer, images, run

    imgs = images(tmp_path, 4)
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("".join(json.dumps({"image_id": f"pic{i}", "image": f"imgs/img{i}.png"}) + "\n" for i in range(4)))
    with FakeOpenAI(reply=answer) as srv:
        spec = srv.spec()
        res = run(["caption", "--images", str(manifest), "--model", spec, "--out", str(tmp_path / "caps"), "--no-progress"])
        assert res.returncode == 0, res.stderr[-2000:]
        (part,) = (tmp_path / "caps" / "captions").glob("*.jsonl")
        assert {json.loads(x)["image_id"] for x in part.read_text().splitlines()} == {f"pic{i}" for i in range(4)}
        res = run(["data", "qa-curate", "--images", str(manifest), "--vlm", spec, "--answerer", spec, "--out",
                   str(tmp_path / "qa"), "--per-image", "1", "--rounds", "1", "--quiet", *FAIL_FAST])
        assert res.returncode == 0, res.stderr[-2000:]
        res = run(["eval", "caption-qa", "--qa", str(tmp_path / "qa" / "dataset"), "--answerer", spec, "--captions",
                   str(part), "--out", str(tmp_path / "eval"), "--budgets", "50", "--set", "mode=sample", *FAIL_FAST])
        assert res.returncode == 0, res.stderr[-2000:]
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    (name,) = results["captioners"]
    assert results["captioners"][name]["missing_captions"] == 0 and results["captioners"][name]["50"]["scored"] == 4
    assert imgs.is_dir()
