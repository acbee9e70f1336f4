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
