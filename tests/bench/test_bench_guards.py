"""``vlrl bench guards``: the cheap guard layer timed caption by caption (no timing threshold here:
the numbers depend on the machine; docs/benchmarks.md records them)."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_reward_cli import run
from vlrl.bench.guards import bench_guards, synthetic_captions


def test_synthetic_captions_are_distinct_and_mixed():
    caps = synthetic_captions(200, seed=1)
    assert len(set(caps)) == 200 and caps == synthetic_captions(200, seed=1)
    lengths = [len(c.split()) for c in caps]
    assert min(lengths) < 20 and max(lengths) > 100


def test_synthetic_sentences_are_mostly_new():
    """Real captions rarely repeat a sentence, so the bench's must not either: a per-sentence cache that
    answered for half of them made the layer look about 30% cheaper than it is."""
    sentences = [s for c in synthetic_captions(2000, seed=0) for s in c.split(". ")]
    assert len(set(sentences)) >= 0.9 * len(sentences)


def test_bench_reports_every_part(tmp_path):
    res = bench_guards(n_captions=60, seed=2)
    assert res["captions"] == 60 and res["captions_per_s"] > 0
    assert 0 < res["median_ms"] <= res["p90_ms"] <= res["max_ms"]
    assert set(res["per_guard"]) == set(res["settings"]["guards"]) >= {"self_praise", "hedging", "padding"}
    assert "llm_defense" not in res["settings"]["guards"]
    assert 0 < res["flagged_share"] < 1  # the generator appends hacks to some captions
    rows = tmp_path / "caps.jsonl"
    rows.write_text("".join(json.dumps({"text": c}) + "\n" for c in ["A red bus at a stop.", "This caption is perfect."]))
    mine = bench_guards(str(rows), text_column="text")
    assert mine["captions"] == 2 and mine["flagged_share"] == 0.5
    with pytest.raises(ValueError, match="llm_defense"):
        bench_guards(n_captions=5, settings={"llm_defense": {"judge": object()}})


def test_the_learned_guard_is_timed_in_and_out_of_the_layer():
    """The default layer holds the learned guard: the same layer without it is timed in alternated passes,
    as many captions as the layer itself; left out by the settings, there is nothing to compare."""
    res = bench_guards(n_captions=40, seed=4)
    assert res["settings"]["guards"][-1] == "learned" and "learned" in res["per_guard"]
    bare = res["without_learned"]
    assert 0 < bare["median_ms"] <= bare["p90_ms"] and -1 < bare["learned_share"] < 1
    assert res["learned"] == res["learned_opt_in"] and res["learned"]["median_ms"] > 0
    off = bench_guards(n_captions=40, seed=4, settings={"learned": False})
    assert off["without_learned"] is None and "learned" not in off["settings"]["guards"]
    assert off["learned"]["median_ms"] > 0  # the default guard, timed alone all the same


def test_prefilters_save_time_side_by_side():
    """The literal prefilters skip most regular expressions of an honest caption: timed alternately,
    caption by caption, on and off (measured about 4x on the 2-core dev machine; the floor is far below)."""
    res = bench_guards(n_captions=120, seed=3)
    pre = res["prefilters"]
    assert pre["captions"] == 120 and pre["median_ms_on"] > 0
    assert pre["speedup"] >= 1.5, pre


def test_cli_writes_the_numbers(tmp_path):
    out = tmp_path / "bench.json"
    p = run("bench", "guards", "--json", str(out), "--captions", "40")
    assert p.returncode == 0, p.stderr
    res = json.loads(out.read_text())
    assert res["captions"] == 40 and "median_ms" in res and "captions_per_s" in res
    assert "captions/s" in p.stdout and "median" in p.stdout and "without the learned guard" in p.stdout
    bad = run("bench", "guards", "--json", str(out), "--input", str(tmp_path / "missing.jsonl"))
    assert bad.returncode == 2 and "vlrl bench guards" in bad.stderr
