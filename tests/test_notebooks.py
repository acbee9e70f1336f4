"""The evaluation notebooks run top to bottom on tiny fixtures, and are committed without outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_the_three_notebooks_exist():
    assert {p.stem for p in NOTEBOOKS} >= {"caption_evaluation", "reward_diagnostics", "training_run"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [] and cell.get("execution_count") is None, f"{path.name}: clear outputs before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom_on_fixtures(path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    for var in ("VLRL_NB_RESULTS", "VLRL_NB_SCORED", "VLRL_NB_RUN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the inline backend must draw
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError naming the failing cell
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.get("output_type") == "error"]
    assert not errors
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert images, f"{path.name}: expected at least one plot"


FIXTURES = Path(__file__).resolve().parent / "fixtures" / "notebooks"


def test_reports_read_the_newest_checkpoint_and_ptst_stages(tmp_path):
    import shutil

    from vlrl.evaluation import reports

    assert reports.find_trainer_state(FIXTURES / "run").parent.name == "checkpoint-4"
    curves = reports.training_curves(reports.load_log_history(FIXTURES / "run"))
    assert list(curves["global_step"]) == [1, 2, 3, 4]  # the train_runtime summary row is dropped
    assert curves["kl"].iloc[-1] == pytest.approx(0.016)
    for stage in ("stage1", "stage2"):
        shutil.copytree(FIXTURES / "run", tmp_path / stage)
    staged = reports.training_curves(reports.load_log_history(tmp_path))
    assert list(staged["global_step"]) == [1, 2, 3, 4, 5, 6, 7, 8] and set(staged["stage"]) == {"stage1", "stage2"}
    with pytest.raises(FileNotFoundError, match="trainer_state.json"):
        reports.find_trainer_state(tmp_path / "stage1" / "checkpoint-4" / "nothing")


def test_reports_scored_rows_and_results():
    from vlrl.evaluation import reports

    df = reports.load_scored(FIXTURES / "scored.jsonl")
    assert len(df) == 17 and df["reward"].isna().sum() == 1
    rates = reports.guard_rates(df)
    assert rates["self_praise"] == pytest.approx(1 / 17) and rates["length"] == 0
    top, bottom = reports.extremes(df, k=2)
    assert top["reward"].iloc[0] == df["reward"].max() and bottom["reward"].iloc[0] == df["reward"].min()
    diff = reports.question_difficulty(df)
    assert diff["difficulty"].is_monotonic_decreasing and set(diff["question"]) == {"What colour is the shape?", "How many shapes are there?"}
    results = reports.load_results(FIXTURES / "results")
    assert set(results) == {"prism", "arena", "caption_qa"}
    summary = reports.summary_table(results)
    assert summary.loc["caprl", "prism_avg"] == pytest.approx((0.42 + 0.29 + 0.47) / 3)
    assert summary.loc["caprl", "arena_score_pct"] == pytest.approx(2.5)
