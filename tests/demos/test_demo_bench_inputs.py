"""The CapRL demo's bench inputs (``vlrl demo --bench-inputs``): captions of its world, from a full
description down to one with most facts left out, each with its scene's questions, whose answers
follow the scene (so the answerer trained on that world has something to read)."""

from __future__ import annotations

from vlrl.demos.shapes.caprl.bench_inputs import bench_command, bench_rows
from vlrl.demos.shapes.caprl.runner import DemoConfig


def test_bench_rows_span_full_to_sparse_captions_with_their_scenes_questions():
    rows = bench_rows(DemoConfig.make(), 16, seed=0)
    assert len(rows) == 16 and rows[0]["drop"] == 0.0 and rows[-1]["drop"] == 0.6
    assert len({r["id"] for r in rows}) == 16
    for r in rows:
        assert r["caption"] and r["questions"]
        assert all(q["answer"] in q["options"] for q in r["questions"])
    full = rows[0]
    # a full caption states the answer of every attribute question about its scene
    stated = [q for q in full["questions"] if q["question"].startswith("what colour")]
    assert stated and all(q["answer"] in full["caption"] for q in stated)
    assert bench_rows(DemoConfig.make(), 16, seed=0) == rows  # the same inputs every time


def test_bench_command_names_the_answerer_rows_and_prompt(tmp_path):
    info = {"answerer": "hf:/m?device=cpu", "settings": {"prompt": "shapes_answer"}, "captions": 16}
    cmd = bench_command(tmp_path, info)
    assert cmd.startswith("vlrl bench reward --answerer 'hf:/m?device=cpu' ")
    assert f"--qa {tmp_path / 'qa.jsonl'}" in cmd and "--set prompt=shapes_answer" in cmd and "--captions 16" in cmd


def test_vlrl_demo_bench_inputs_writes_the_rows_and_prints_the_bench_command(tmp_path):
    """The flag's plumbing, with the answerer already in the warm-start cache (training it is the
    demo's own tested path): the rows, bench.json with the cached answerer's spec, and the command."""
    import json

    from typer.testing import CliRunner

    from vlrl.cli import app
    from vlrl.demos.shapes.tiny_models.warmstart import paths

    cfg = DemoConfig.make()
    cache = tmp_path / "cache"
    ws = paths(cfg.warm, cfg.seed, cfg.seed + cfg.judge_seed_offset, cache)
    ws.answerer.mkdir(parents=True)
    (ws.answerer / "warmstart.json").write_text("{}")  # a finished cache entry: nothing is trained
    res = CliRunner().invoke(app, ["demo", "--bench-inputs", str(tmp_path / "in"), "--cache-dir", str(cache)])
    assert res.exit_code == 0, res.output
    info = json.loads((tmp_path / "in" / "bench.json").read_text())
    assert info["answerer"].startswith(f"hf:{ws.answerer}?") and info["settings"] == {"prompt": cfg.warm.answer_prompt}
    rows = [json.loads(x) for x in (tmp_path / "in" / "qa.jsonl").read_text().splitlines()]
    assert rows == bench_rows(cfg, 16, seed=0)
    assert bench_command(tmp_path / "in", info) in res.output
