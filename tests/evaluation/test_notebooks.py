"""The evaluation notebooks run top to bottom on what the real commands write, and are committed without outputs.

Their inputs are produced once per session by ``vlrl eval prism|arena|caption-qa`` and a tiny
``vlrl train grpo`` run (tests/support/notebook_runs.py); only the scored reward file is a fixture, and it
is itself checked against ``vlrl reward score`` output (tests/cli/test_chaining.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import notebook_runs, paths

notebook_results = notebook_runs.notebook_results  # session fixtures: the real commands' output
notebook_run = notebook_runs.notebook_run

NOTEBOOKS = sorted((paths.ROOT / "notebooks").glob("*.ipynb"))


def test_the_three_notebooks_exist():
    assert {p.stem for p in NOTEBOOKS} >= {"caption_evaluation", "reward_diagnostics", "training_run"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [] and cell.get("execution_count") is None, f"{path.name}: clear outputs before committing"


@pytest.fixture
def notebook_inputs(request, monkeypatch):
    """Point each notebook's variable at real command output (only the fixtures that notebook needs run)."""
    for var in ("VLRL_NB_RESULTS", "VLRL_NB_SCORED", "VLRL_NB_RUN"):
        monkeypatch.delenv(var, raising=False)
    stem = request.node.callspec.params["path"].stem
    if stem == "caption_evaluation":
        monkeypatch.setenv("VLRL_NB_RESULTS", str(request.getfixturevalue("notebook_results")))
    elif stem == "training_run":
        monkeypatch.setenv("VLRL_NB_RUN", str(request.getfixturevalue("notebook_run")))


# slow: the inputs of these two come from real command runs (a tiny GRPO run among them)
FROM_RUNS = [pytest.param(p, marks=pytest.mark.slow) if p.stem in ("caption_evaluation", "training_run") else p for p in NOTEBOOKS]


@pytest.mark.parametrize("path", FROM_RUNS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom_on_real_command_output(path, notebook_inputs, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the inline backend must draw
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError naming the failing cell
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.get("output_type") == "error"]
    assert not errors
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert images, f"{path.name}: expected at least one plot"


FIXTURES = paths.FIXTURES / "notebooks"


def _log_rows(state_file: Path) -> list[dict]:
    return [h for h in json.loads(state_file.read_text())["log_history"] if "step" in h and "train_runtime" not in h]


@pytest.mark.slow
def test_reports_read_the_newest_checkpoint_and_ptst_stages(tmp_path, notebook_run):
    import shutil

    from vlrl.evaluation import reports

    checkpoints = sorted(notebook_run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert len(checkpoints) >= 2  # the run saved more than once: the newest must be the one read
    newest = checkpoints[-1]
    assert reports.find_trainer_state(notebook_run).parent == newest
    rows = _log_rows(newest / "trainer_state.json")
    steps = [r["step"] for r in rows]
    curves = reports.training_curves(reports.load_log_history(notebook_run))
    assert list(curves["global_step"]) == steps == list(range(1, len(steps) + 1))  # the train_runtime summary row is dropped
    assert list(curves["reward"]) == pytest.approx([r["reward"] for r in rows])
    assert list(curves["rewards/caprl_qa/mean"]) == pytest.approx([r["rewards/caprl_qa/mean"] for r in rows])
    for stage in ("stage1", "stage2"):
        shutil.copytree(notebook_run, tmp_path / stage, ignore=shutil.ignore_patterns("*.safetensors", "_data", "completions"))
    staged = reports.training_curves(reports.load_log_history(tmp_path))
    assert list(staged["global_step"]) == list(range(1, 2 * len(steps) + 1)) and set(staged["stage"]) == {"stage1", "stage2"}
    with pytest.raises(FileNotFoundError, match="trainer_state.json"):
        reports.find_trainer_state(tmp_path / "stage1" / newest.name / "nothing")


def test_reports_scored_rows():
    from vlrl.evaluation import reports

    df = reports.load_scored(FIXTURES / "scored.jsonl")
    assert len(df) == 17 and df["reward"].isna().sum() == 1
    rates = reports.guard_rates(df)
    assert rates["self_praise"] == pytest.approx(1 / 17) and rates["length"] == 0
    top, bottom = reports.extremes(df, k=2)
    assert top["reward"].iloc[0] == df["reward"].max() and bottom["reward"].iloc[0] == df["reward"].min()
    diff = reports.question_difficulty(df)
    assert diff["difficulty"].is_monotonic_decreasing and set(diff["question"]) == {"What colour is the shape?", "How many shapes are there?"}


@pytest.mark.slow
def test_reports_results_of_the_real_commands(notebook_results):
    from vlrl.evaluation import reports

    results = reports.load_results(notebook_results)  # the commands' whole --out folders: job.json etc. are left out
    assert set(results) == {"prism", "arena", "caption_qa"}
    assert sorted(label for label, _ in results["prism"]) == ["prism_base", "prism_caprl"]
    summary = reports.summary_table(results)
    prism = json.loads((notebook_results / "prism_caprl" / "results.json").read_text())
    accs = [b["accuracy"] for b in prism["benchmarks"].values()]
    assert len(accs) == 2 and summary.loc["caprl", "prism_avg"] == pytest.approx(sum(accs) / len(accs))
    arena = json.loads((notebook_results / "arena" / "results.json").read_text())
    assert summary.loc["caprl", "arena_score_pct"] == pytest.approx(arena["baselines"]["base"]["score_pct"])
    capqa = json.loads((notebook_results / "caption_qa" / "results.json").read_text())
    assert summary.loc["base", "capqa_50"] == pytest.approx(capqa["captioners"]["base"]["50"]["accuracy"])
    # the scripted world makes the comparison meaningful: the captioner that names the colour wins everywhere
    assert summary.loc["caprl", "prism_avg"] > summary.loc["base", "prism_avg"]
    assert summary.loc["caprl", "arena_score_pct"] > 0
    assert summary.loc["caprl", "capqa_full"] > summary.loc["base", "capqa_full"]
