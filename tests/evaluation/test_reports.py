"""The notebooks' readers on the shapes that fooled a first-hour user: two runs of one captioner, two
runs' ``checkpoint-100``, a reward with guard penalties and no per-question detail, a run at β = 0."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from vlrl.evaluation import reports


def _prism(path: Path, captioner: str, accuracy: float) -> None:
    path.mkdir(parents=True)
    (path / "results.json").write_text(json.dumps({
        "captioner": captioner, "benchmarks": {"colours": {"accuracy": accuracy, "n": 4}}}))


def test_two_runs_of_one_captioner_stay_two_rows(tmp_path):
    # The same model with other options, and two runs' checkpoint-100: four runs, four rows.
    _prism(tmp_path / "terse", "py:mod:vlm?terse=1", 1.0)
    _prism(tmp_path / "plain", "py:mod:vlm", 0.25)
    _prism(tmp_path / "run-a" / "checkpoint-100", "hf:/ckpt/a", 0.5)
    _prism(tmp_path / "run-b" / "checkpoint-100", "hf:/ckpt/b", 0.75)
    runs = reports.load_results(tmp_path)["prism"]
    labels = sorted(label for label, _ in runs)
    assert labels == ["plain", "run-a/checkpoint-100", "run-b/checkpoint-100", "terse"]
    table = reports.prism_table(runs)
    assert len(table) == 4
    assert sorted(table["colours"]) == [0.25, 0.5, 0.75, 1.0]  # the better run's 1.0 is still there
    assert table.loc["mod:vlm (terse)", "colours"] == 1.0 and table.loc["mod:vlm (plain)", "colours"] == 0.25


def test_labels_grow_only_where_they_clash():
    files = [Path("/r/a/checkpoint-1/results.json"), Path("/r/b/checkpoint-1/results.json"), Path("/r/c/results.json"),
             Path("/x/same/results.json"), Path("/y/same/results.json"), Path("/r/scores.json")]
    assert reports.unique_labels(files) == ["a/checkpoint-1", "b/checkpoint-1", "c", "x/same", "y/same", "scores"]
    # whole paths that clash still give two labels: one file named twice, a folder's results.json and a file
    twice = [Path("/r/a/results.json"), Path("/r/a/results.json"), Path("/x/a.json")]
    assert reports.unique_labels(twice) == ["r/a", "r/a #2", "x/a"]


def test_caption_qa_and_arena_keep_two_runs_of_one_captioner_apart():
    def capqa(acc):
        return {"budgets": [10], "captioners": {"m": {"10": {"accuracy": acc}, "full": {"accuracy": acc}}}}

    def arena(pct):
        return {"candidate": "m", "baselines": {"base": {"pairs": 4, "score_pct": pct}}}

    results = {"caption_qa": [("run-a", capqa(0.4)), ("run-b", capqa(0.9))],
               "arena": [("arena-a", arena(10.0)), ("arena-b", arena(30.0))]}
    qa = reports.caption_qa_table(results["caption_qa"])
    assert qa.loc["m (run-a)", "full"] == 0.4 and qa.loc["m (run-b)", "full"] == 0.9
    ar = reports.arena_table(results["arena"])
    assert sorted(ar["candidate"]) == ["m (arena-a)", "m (arena-b)"]
    summary = reports.summary_table(results)
    assert summary.loc["m (arena-a)", "arena_score_pct"] == 10.0 and summary.loc["m (arena-b)", "arena_score_pct"] == 30.0
    assert summary.loc["m (run-b)", "capqa_full"] == 0.9  # not averaged or overwritten into one "m" row


def _scored(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def test_guard_rates_hold_guards_only():
    df = _scored([
        {"reward": -1.0, "guard/self_praise": 1.0, "guard/length": 0.0, "guard/any": 1.0, "guard/penalty": 1.5,
         "guard/self_praise/self_claim": 1.0, "guard/doubted": 1.0},  # a family column breaks a guard down; it is no guard
        {"reward": 0.5, "guard/self_praise": 0.0, "guard/length": 1.0, "guard/any": 1.0, "guard/penalty": 0.5},
        {"reward": 0.7, "guard/self_praise": 0.0, "guard/length": 0.0, "guard/any": 0.0, "guard/penalty": 0.0},
    ])
    rates = reports.guard_rates(df)
    assert set(rates.index) == {"self_praise", "length"}  # the union, the penalty and the doubted hits are no guards
    assert rates["self_praise"] == pytest.approx(1 / 3) and rates["length"] == pytest.approx(1 / 3)
    assert reports.any_guard_rate(df) == pytest.approx(2 / 3)
    assert reports.any_guard_rate(_scored([{"reward": 1.0}])) is None


def test_difficulty_is_never_read_off_the_reward():
    # A guard's penalty took the reward to -1.0: "1 - reward" would call the image's questions 2.0 hard.
    guarded = [{"image_id": "a", "reward": -1.0}, {"image_id": "a", "reward": 0.2}]
    empty = reports.question_difficulty(_scored(guarded))
    assert empty.empty and "per_question" in empty.attrs["note"]
    with_acc = reports.question_difficulty(_scored([{**r, "qa_acc": acc} for r, acc in zip(guarded, (0.5, 1.0), strict=True)]))
    assert list(with_acc["accuracy"]) == [0.75] and list(with_acc["difficulty"]) == [0.25]
    assert with_acc["difficulty"].between(0, 1).all()


def test_an_empty_kl_panel_says_why_and_steps_are_whole():
    import matplotlib

    matplotlib.use("Agg")
    history = pd.DataFrame({"step": [1, 2, 3], "reward": [0.1, 0.2, 0.3], "completions/mean_length": [9.0, 8.0, 7.0],
                            "completions/clipped_ratio": [0.0, 0.5, 0.0]})
    fig = reports.plot_training_curves(reports.training_curves(history))
    kl_axis = [ax for ax in fig.axes if ax.get_title() == "KL to reference"][0]
    assert any("beta = 0" in t.get_text() for t in kl_axis.texts)
    reward_axis = [ax for ax in fig.axes if ax.get_title() == "reward"][0]
    assert not reward_axis.texts
    fig.canvas.draw()
    ticks = [t for t in kl_axis.get_xticks() if 1 <= t <= 3]
    assert ticks and all(float(t).is_integer() for t in ticks)
