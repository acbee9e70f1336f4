"""Runs you can leave overnight (tiny CPU recipes): no signal stops the run, a finished run is not
trained again, raising max_steps re-plans the schedule, another run's folder is refused, PTST stages
continue the data stream and a torn final save is recovered without an extra step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.paths import ROOT

TINY = ROOT / "train" / "recipes" / "tiny"

pytestmark = pytest.mark.slow

HELPERS = '''
import json, os, signal
from transformers import TrainerCallback

def none_reward(completions, **kw):
    return [None] * len(completions)

def record_ids(completions, id=None, **kw):
    """Append (group size, unique prompt ids) per reward call to $VLRL_TEST_IDS; reward 0."""
    ids = [str(i) for i in id]
    group = ids.count(ids[0])
    with open(os.environ["VLRL_TEST_IDS"], "a") as fh:
        fh.write(json.dumps({"group": group, "ids": sorted(set(ids))}) + "\\n")
    return [0.0] * len(completions)

class LrSpy(TrainerCallback):
    def on_step_begin(self, args, state, control, optimizer=None, **kw):
        with open(os.environ["VLRL_TEST_LR"], "a") as fh:
            fh.write(json.dumps([state.global_step, optimizer.param_groups[0]["lr"]]) + "\\n")

class KillAtStage2End(TrainerCallback):
    def on_save(self, args, state, control, **kw):
        if args.output_dir.rstrip("/").endswith("stage-2") and state.global_step == state.max_steps:
            os.kill(os.getpid(), signal.SIGKILL)
'''


@pytest.fixture
def helpers(tmp_path, monkeypatch):
    (tmp_path / "vlrl_test_helpers.py").write_text(HELPERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _cli(*args):
    from vlrl.cli import app

    return CliRunner().invoke(app, list(args))


def test_all_none_rewards_stop_the_run_non_zero(helpers):
    out = helpers / "none"
    res = _cli("train", "grpo", "--recipe", str(TINY / "caprl_tiny.yaml"), f"output_dir={out}", "max_steps=6",
               "rewards=[{name: 'vlrl_test_helpers:none_reward'}]", "run.max_none_reward_steps=2")
    assert res.exit_code == 1, res.output
    assert "every reward was None for 2 consecutive steps" in res.output
    assert not (out / "metrics.json").exists()  # nothing reported as a finished run


def test_dead_answerer_behind_a_guard_stops_the_run_naming_the_backend(tmp_path):
    """The answerer returns 500 on every request; the guard (which fires on every caption) must not
    turn each None into its floor (#30 finding 2c). The run must stop non-zero within
    max_none_reward_steps, with one line naming the backend, and save no finished model (#24 finding 2)."""
    from tests.support.fake_openai import FakeOpenAI

    out = tmp_path / "dead"
    with FakeOpenAI(model="answerer") as srv:
        srv.fail = (500, '{"error": {"message": "upstream down"}}')
        reward = ("rewards=[{name: caprl_qa, settings: {answerer: '" + srv.spec() + "', mode: exact, "
                  "questions_per_caption: 2, rounds: 1, min_letter_mass: 0.0}, "
                  "guards: {policy: veto, floor: -1.0, enabled: [length], length: {min_words: 1000}}}]")
        res = _cli("train", "grpo", "--recipe", str(TINY / "caprl_tiny.yaml"), f"output_dir={out}", "max_steps=8",
                   "save_steps=1", reward, "run.max_none_reward_steps=2")
    assert res.exit_code == 1, res.output
    assert "every reward was None for 2 consecutive steps" in res.output  # not -1.0 floors at std 0
    assert f"{srv.base_url}@answerer" in res.output
    assert not (out / "metrics.json").exists()
    assert not (out / "checkpoint-3").exists()  # stopped within the bound, not after max_steps


def test_dead_answerer_stops_every_rank_of_a_torchrun_job(tmp_path):
    """The reward-health rule across processes (#24 finding 2): under torchrun with 2 CPU ranks each
    rank scores its own completions, and the rule decides on the gathered rewards and health counts,
    so both ranks stop at the same step with the one line naming the backend. A rank that stopped
    alone would leave the other waiting in a collective until the job timed out."""
    from tests.support.fake_openai import FakeOpenAI

    out = tmp_path / "dead-ddp"
    with FakeOpenAI(model="answerer") as srv:
        srv.fail = (500, '{"error": {"message": "upstream down"}}')
        reward = ("rewards=[{name: caprl_qa, settings: {answerer: '" + srv.spec() + "', mode: exact, "
                  "questions_per_caption: 2, rounds: 1, min_letter_mass: 0.0}, "
                  "guards: {policy: veto, floor: -1.0, enabled: [length], length: {min_words: 1000}}}]")
        res = subprocess.run([str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node", "2",
                              str(ROOT / "train" / "grpo.py"), "--recipe", str(TINY / "caprl_tiny.yaml"),
                              f"output_dir={out}", "max_steps=8", "save_steps=1", reward, "run.max_none_reward_steps=2"],
                             capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode != 0
    stops = [ln for ln in res.stderr.splitlines() if ln.startswith("error: training stopped: every reward was None for 2")]
    assert len(stops) == 2, res.stderr[-4000:]  # each rank reached the verdict itself, at the same step
    assert all(f"{srv.base_url}@answerer" in ln for ln in stops)
    assert not (out / "metrics.json").exists() and not (out / "checkpoint-2").exists()


def test_finished_rerun_raised_max_steps_and_another_run(helpers, monkeypatch):
    out = helpers / "run"
    lr_log = helpers / "lr.jsonl"
    monkeypatch.setenv("VLRL_TEST_LR", str(lr_log))
    base = ["--recipe", str(TINY / "caprl_tiny.yaml"), f"output_dir={out}", "save_steps=10",
            "callbacks=[vlrl_test_helpers:LrSpy]", "lr_scheduler_type=linear"]
    first = _cli("train", "grpo", *base, "max_steps=2")
    assert first.exit_code == 0, first.output
    assert (out / "checkpoint-2").is_dir()  # the final step is always checkpointed
    steps_run = len(lr_log.read_text().splitlines())
    assert steps_run == 2

    again = _cli("train", "grpo", *base, "max_steps=2")
    assert again.exit_code == 0, again.output
    assert '"status": "already finished"' in again.output
    assert len(lr_log.read_text().splitlines()) == steps_run  # not trained again

    more = _cli("train", "grpo", *base, "max_steps=4")
    assert more.exit_code == 0, more.output
    lrs = [json.loads(x) for x in lr_log.read_text().splitlines()][steps_run:]
    assert [s for s, _ in lrs] == [2, 3]  # continued from step 2, no step repeated
    assert all(lr > 0 for _, lr in lrs), lrs  # no step at the old schedule's final lr (0)
    assert json.loads((out / "metrics.json").read_text())["global_step"] == 4

    other = _cli("train", "grpo", *base, "max_steps=4", "learning_rate=3e-4")
    assert other.exit_code == 2
    assert "holds a different run" in other.output and "trainer.learning_rate: 0.0001 → 0.0003" in other.output
    forced = _cli("train", "grpo", *base, "max_steps=4", "learning_rate=3e-4", "--force")
    assert forced.exit_code == 0, forced.output


def test_ptst_stages_see_new_prompts_and_a_torn_final_save_costs_no_step(helpers):
    out = helpers / "ptst"
    ids_log = helpers / "ids.jsonl"
    env = {**os.environ, "PYTHONPATH": f"{helpers}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": "1", "VLRL_TEST_IDS": str(ids_log)}
    cmd = [str(Path(sys.executable).parent / "vlrl"), "train", "ptst", "--recipe", str(TINY / "vision_r1_tiny_ptst.yaml"),
           f"output_dir={out}", "rewards=[{name: hfrrf, settings: {soft: true}}, {name: 'vlrl_test_helpers:record_ids'}]"]
    first = subprocess.run([*cmd, "callbacks=[vlrl_test_helpers:KillAtStage2End]"], env=env, capture_output=True,
                           text=True, timeout=900)
    assert first.returncode == -9, first.stderr[-3000:]
    assert (out / "stage-2" / "checkpoint-2").is_dir() and not (out / "stage-2" / "metrics.json").exists()
    calls = [json.loads(x) for x in ids_log.read_text().splitlines()]

    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "finishing it without training again" in second.stderr
    assert len(ids_log.read_text().splitlines()) == len(calls)  # no step was trained twice
    m2 = json.loads((out / "stage-2" / "metrics.json").read_text())
    assert m2["global_step"] == 2 and m2["data_offset"] == 4

    stage1 = {i for c in calls if c["group"] == 4 for i in c["ids"]}
    stage2 = {i for c in calls if c["group"] == 2 for i in c["ids"]}
    assert len(stage1) == 4 and len(stage2) == 4  # 2 prompts per step × 2 steps each
    assert not stage1 & stage2  # stage 2 continued the stream: 8 prompts, each seen once

    third = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert third.returncode == 0 and "already finished all 2 stages" in third.stderr


def test_grpo_step_with_two_images_per_prompt(tmp_path):
    from tests.support.training import two_image_source
    from vlrl.training.grpo import run_grpo
    from vlrl.training.recipe import load_recipe

    src = two_image_source(tmp_path)
    out = tmp_path / "two"
    m = run_grpo(load_recipe(TINY / "vision_r1_tiny_ptst.yaml", [
        f"output_dir={out}", f"data.source={src}", "data.max_pixels=3136", "stages=null", "max_steps=1",
        "num_generations=4", "max_completion_length=8", "rewards=[{name: hfrrf}, {name: guards, weight: 0.1}]"]))
    assert m["global_step"] == 1
    rows = [json.loads(x) for x in next((out / "completions").glob("step-*.jsonl")).read_text().splitlines()]
    assert rows and all(len(r["images"]) == 2 for r in rows)  # both images reached generation
    assert all("gold" in r and "prediction" in r for r in rows)  # hfrrf's gold and parsed prediction
    assert 0.0 <= m["reward_time_share"] <= 1.0


def test_every_completion_is_graded_against_its_own_rows_answer(tmp_path):
    """A reward handed another row's gold answer still returns plausible numbers and trains noise.

    Each row's answer is written into its own question, so the completions log (prompt, and the
    gold answer hfrrf received) shows whether the dataset vlrl builds (prompt template, answer
    column) and the columns it hands the reward stay with each completion's own prompt, in both
    PTST stages (groups of 4, then of 2).
    """
    import re

    from PIL import Image

    from vlrl.training.ptst import run_ptst
    from vlrl.training.recipe import load_recipe

    Image.new("RGB", (32, 32), (200, 30, 30)).save(tmp_path / "img.png")
    src = tmp_path / "own.jsonl"
    src.write_text("".join(json.dumps({"id": f"q{i}", "image": "img.png", "question": f"Say {100 + 7 * i}.",
                                       "answer": str(100 + 7 * i)}) + "\n" for i in range(12)))
    out = tmp_path / "own"
    run_ptst(load_recipe(TINY / "vision_r1_tiny_ptst.yaml", [f"output_dir={out}", f"data.source={src}"]))
    seen = 0
    for stage, group in ((1, 4), (2, 2)):
        files = sorted((out / f"stage-{stage}" / "completions").glob("step-*.jsonl"))
        assert files, f"stage {stage} logged no completions"
        for f in files:
            rows = [json.loads(x) for x in f.read_text().splitlines()]
            assert len(rows) % group == 0
            for r in rows:
                said = re.findall(r"Say (\d+)\.", r["prompt"])
                assert said == [str(r["gold"])], (stage, r["prompt"][-80:], r["gold"])
            for k in range(0, len(rows), group):  # a group is one prompt's completions
                assert len({r["prompt"] for r in rows[k:k + group]}) == 1
            seen += len(rows)
    assert seen == 2 * (2 * 4 + 2 * 2)  # every step's batch was logged and checked
