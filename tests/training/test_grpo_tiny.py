"""End-to-end tiny runs of the shipped CPU recipes: GRPO, resume, KL reference, PTST with a kill -9, SFT."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from vlrl.training.recipe import load_recipe

TINY = ROOT / "train" / "recipes" / "tiny"

pytestmark = pytest.mark.slow


def _state_dict(path):
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(str(path)).state_dict()


def _same(a, b) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)


def test_caprl_tiny_runs_and_logs_rewards_subscores_and_completions(tmp_path):
    from vlrl.training.grpo import run_grpo

    out = tmp_path / "caprl"
    metrics = run_grpo(load_recipe(TINY / "caprl_tiny.yaml", [f"output_dir={out}"]))
    assert metrics["global_step"] == 3
    assert (out / "model.safetensors").is_file() and (out / "checkpoint-2").is_dir()
    history = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    keys = set().union(*history)
    assert "rewards/caprl_qa/mean" in keys  # per-reward (TRL)
    assert "caprl_qa/qa_acc" in keys  # per-sub-score (vlrl Reward.log_metric)
    assert any(k.startswith("caprl_qa/guard/") for k in keys)  # the guard block is wired in
    files = sorted((out / "completions").glob("step-*.jsonl"))
    assert files, "no sampled completions written"
    rows = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert len(rows) == 8  # one generation batch: 4 per device × 2 accumulation
    assert all((out / "completions" / r["images"][0]).is_file() for r in rows)
    assert all("caprl_qa" in r["rewards"] and "Please describe" in r["prompt"] for r in rows)


def test_resume_restores_checkpoint_weights_not_base(tmp_path):
    """transformers #43701: Trainer's own resume leaves Qwen-VL at its base weights; ours must not."""
    from vlrl.training.grpo import build_trainer, run_grpo
    from vlrl.training.runstate import prepare

    out = tmp_path / "run"
    over = [f"output_dir={out}", "max_steps=2", "save_steps=1", "learning_rate=1e-2"]
    recipe = load_recipe(TINY / "caprl_tiny.yaml", over)
    run_grpo(recipe)
    ckpt = out / "checkpoint-1"
    base = _state_dict(prepare(load_recipe(TINY / "caprl_tiny.yaml", over)).model.path)
    at_ckpt = _state_dict(ckpt)
    assert not _same(base, at_ckpt), "training did not change the weights; the test would prove nothing"

    recipe = prepare(load_recipe(TINY / "caprl_tiny.yaml", [*over, f"output_dir={tmp_path / 'resumed'}", "max_steps=3"]))
    trainer, ckpt_arg = build_trainer(recipe, resume=ckpt)
    seen = {}
    original = trainer.training_step

    def spy(*a, **k):  # weights and step at the first step after resuming
        if not seen:
            seen["weights"] = {k2: v.detach().clone() for k2, v in trainer.model.state_dict().items()}
            seen["step"] = trainer.state.global_step
        return original(*a, **k)

    trainer.training_step = spy
    trainer.train(resume_from_checkpoint=ckpt_arg)
    assert seen["step"] == 1  # optimizer/scheduler/step state came from the checkpoint
    assert _same(seen["weights"], at_ckpt)
    assert not _same(seen["weights"], base)
    assert trainer.state.global_step == 3


def test_reference_model_only_when_beta_positive(tmp_path):
    from vlrl.training.grpo import build_trainer
    from vlrl.training.runstate import prepare

    for beta, has_ref in ((0.0, False), (0.05, True)):
        r = prepare(load_recipe(TINY / "caprl_tiny.yaml", [f"output_dir={tmp_path}", f"beta={beta}"]))
        trainer, _ = build_trainer(r)
        assert (trainer.ref_model is not None) is has_ref
        if has_ref:  # the reference is the start model, frozen
            import torch

            base = _state_dict(r.model.path)
            ref = trainer.ref_model.state_dict()
            assert all(torch.equal(ref[k], base[k]) for k in base)
        frozen = [n for n, p in trainer.model.named_parameters() if not p.requires_grad]
        assert frozen and all(".visual." in "." + n for n in frozen) and not any("merger" in n for n in frozen)


def test_lora_run_and_resume(tmp_path):
    import torch
    from safetensors.torch import load_file

    from vlrl.training.grpo import build_trainer, run_grpo
    from vlrl.training.runstate import prepare

    out = tmp_path / "lora"
    over = [f"output_dir={out}", "model.lora={r: 4, alpha: 8}", "max_steps=2", "save_steps=1", "learning_rate=1e-2"]
    m = run_grpo(load_recipe(TINY / "caprl_tiny.yaml", over))
    assert m["global_step"] == 2
    assert (out / "adapter_config.json").is_file()
    saved = load_file(str(out / "checkpoint-1" / "adapter_model.safetensors"))
    trainer, _ = build_trainer(prepare(load_recipe(TINY / "caprl_tiny.yaml", over)), resume=out / "checkpoint-1")
    live = {k: v for k, v in trainer.model.state_dict().items() if "lora_" in k}
    assert saved and len(live) == len(saved)
    for k, v in saved.items():  # peft drops the adapter name when saving
        match = [lv for lk, lv in live.items() if lk.replace(".default", "").endswith(k.removeprefix("base_model.model."))]
        assert len(match) == 1 and torch.equal(match[0], v), k
    assert any(p.requires_grad for n, p in trainer.model.named_parameters() if "lora_" in n)


def test_ptst_with_lora_hands_merged_weights_to_the_next_stage(tmp_path):
    from vlrl.training.ptst import run_ptst

    out = tmp_path / "pl"
    res = run_ptst(load_recipe(TINY / "vision_r1_tiny_ptst.yaml", [f"output_dir={out}", "model.lora={r: 4, alpha: 8}"]))
    assert [s["stage"] for s in res["stages"]] == [1, 2]
    assert (out / "stage-1" / "model.safetensors").is_file() and not (out / "stage-1" / "adapter_config.json").exists()
    assert _state_dict(out / "stage-1").keys() == _state_dict(res["stages"][0]["start_model"]).keys()


KILLER = '''
import os, signal
from transformers import TrainerCallback

class KillInStage2(TrainerCallback):
    def on_save(self, args, state, control, **kw):
        if args.output_dir.rstrip("/").endswith("stage-2") and state.global_step == 1:
            os.kill(os.getpid(), signal.SIGKILL)
'''


def test_ptst_resumes_at_the_right_stage_and_step_after_kill_9(tmp_path):
    out = tmp_path / "ptst"
    (tmp_path / "killer.py").write_text(KILLER)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    cmd = [str(Path(sys.executable).parent / "vlrl"), "train", "ptst", "--recipe", str(TINY / "vision_r1_tiny_ptst.yaml"), f"output_dir={out}"]
    first = subprocess.run([*cmd, "callbacks=[killer:KillInStage2]"], env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == -9, first.stderr[-3000:]
    state = json.loads((out / "ptst_state.json").read_text())
    assert state["completed"] == [1] and state["current"] == 2
    stage1 = (out / "stage-1" / "metrics.json").read_text()
    assert (out / "stage-2" / "checkpoint-1").is_dir() and not (out / "stage-2" / "metrics.json").exists()

    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "stage 1 already done" in second.stderr
    assert (out / "stage-1" / "metrics.json").read_text() == stage1  # stage 1 was not rerun
    m2 = json.loads((out / "stage-2" / "metrics.json").read_text())
    assert m2["resumed_from"].endswith("stage-2/checkpoint-1") and m2["global_step"] == 2
    assert m2["start_model"].endswith("stage-1")
    for k, (cap, group) in enumerate([(12, 4), (24, 2)], 1):
        m = json.loads((out / f"stage-{k}" / "metrics.json").read_text())
        assert m["config"]["max_completion_length"] == cap and m["config"]["num_generations"] == group
        assert 0 < m["completion_length_max"] <= cap
        assert 0.0 <= m["truncation_rate"] <= 1.0 and "reward_mean" in m and "completion_length_mean" in m
        assert (out / f"stage-{k}" / "model.safetensors").is_file()
    state = json.loads((out / "ptst_state.json").read_text())
    assert state["completed"] == [1, 2] and state["current"] is None
    # stage 2 really started from stage 1's weights, and trained: its weights moved, unless every
    # stage-2 group tied (two random completions with equal rewards give GRPO no advantage and no
    # gradient; beta's KL is zero at the start model), which TRL's own log then says
    from vlrl.evaluation.reports import find_trainer_state

    hist = json.loads(find_trainer_state(out / "stage-2").read_text())["log_history"]
    tied = [h["frac_reward_zero_std"] for h in hist if "frac_reward_zero_std" in h]
    assert len(tied) == 2
    if min(tied) < 1.0:
        assert not _same(_state_dict(out / "stage-1"), _state_dict(out / "stage-2"))
    else:
        assert _same(_state_dict(out / "stage-1"), _state_dict(out / "stage-2"))  # no signal, no step


def test_sft_tiny(tmp_path):
    from vlrl.training.sft import run_sft

    m = run_sft(load_recipe(TINY / "sft_tiny.yaml", [f"output_dir={tmp_path / 'sft'}"]))
    assert m["global_step"] == 3 and m["rows"] == 8
    assert m["loss_last"] < m["loss_first"]  # lr 1e-3 on 8 fixed targets: the loss must drop


@pytest.mark.parametrize("method,name", [("grpo", "rubicap_tiny"), ("sft", "sft_tiny")])
def test_tiny_recipes_through_the_cli(tmp_path, method, name):
    """`vlrl train grpo|sft --recipe FILE output_dir=DIR` with nothing else prepared."""
    from typer.testing import CliRunner

    from vlrl.cli import app

    out = tmp_path / name
    res = CliRunner().invoke(app, ["train", method, "--recipe", str(TINY / f"{name}.yaml"), f"output_dir={out}"])
    assert res.exit_code == 0, res.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["global_step"] >= 2
    assert (out / "model.safetensors").is_file()
    if method == "grpo":
        assert "rewards/rubicap_rubric/mean" in metrics
        assert sorted((out / "completions").glob("step-*.jsonl"))


def test_caprl_tiny_trl_completion_table(tmp_path):
    """log_completions: TRL's own parquet table sits next to vlrl's JSONL."""
    from vlrl.training.grpo import run_grpo

    out = tmp_path / "c"
    run_grpo(load_recipe(TINY / "caprl_tiny.yaml", [f"output_dir={out}", "max_steps=1"]))
    assert (out / "completions" / "completions_00001.parquet").is_file()
    assert (out / "completions" / "step-00001.jsonl").is_file()


def test_latest_checkpoint_skips_one_torn_while_saving(tmp_path):
    # Regression: a kill -9 while the Trainer wrote trainer_state.json (its last, non-atomic file)
    # left a newest checkpoint whose state did not parse, and every rerun crashed on it.
    from vlrl.training.runstate import latest_checkpoint

    for n, state in ((2, '{"global_step": 2}'), (4, '{"global_st'), (10, None)):
        (tmp_path / f"checkpoint-{n}").mkdir()
        if state is not None:
            (tmp_path / f"checkpoint-{n}" / "trainer_state.json").write_text(state)
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-2"
    assert latest_checkpoint(tmp_path / "missing") is None


def _last_report(stdout: str) -> dict:
    """The entry point's JSON report: the last top-level object on stdout (trainer logs come before it)."""
    lines = stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line == "{")
    return json.loads("\n".join(lines[start:]))


@pytest.mark.parametrize(
    "script,recipe,over",
    [
        ("grpo", "caprl_tiny.yaml", ["max_steps=2", "save_steps=1"]),
        ("ptst", "vision_r1_tiny_ptst.yaml", ["stages=[{max_completion_length: 12, num_generations: 4, steps: 1}, "
                                              "{max_completion_length: 24, num_generations: 2, steps: 1}]"]),
        ("sft", "sft_tiny.yaml", ["max_steps=2"]),
    ],
)
def test_entry_point_scripts_train_then_report_a_finished_run(tmp_path, script, recipe, over):
    """`python train/<method>.py` reads straight through the library's steps; run twice, the second run
    reports the finished run and trains nothing (the same behaviour as `vlrl train <method>`)."""
    out = tmp_path / script
    cmd = [sys.executable, str(ROOT / "train" / f"{script}.py"), "--recipe", str(TINY / recipe), f"output_dir={out}", *over]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    metrics = _last_report(first.stdout)
    assert json.loads((out / "metrics.json").read_text())["finished"] is True
    if script == "ptst":
        assert [s["stage"] for s in metrics["stages"]] == [1, 2]
    else:
        assert metrics["global_step"] == 2 and (out / "model.safetensors").is_file()
    if script == "grpo":  # each step's completions table is shown once, not again after training
        titles = [line for line in first.stdout.splitlines() if line.startswith("╭") and " Step " in line]
        assert len(titles) == 2 and len(set(titles)) == 2, titles
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    if script != "ptst":
        assert _last_report(again.stdout)["status"] == "already finished"
    bad = subprocess.run([*cmd[:2], "--recipe", str(tmp_path / "missing.yaml")], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("error:") and len(bad.stderr.strip().splitlines()) == 1


KILL_AT_2 = '''
import os, signal
from transformers import TrainerCallback

class KillAfterStep2(TrainerCallback):
    def on_save(self, args, state, control, **kw):
        if state.global_step == 2:
            os.kill(os.getpid(), signal.SIGKILL)
'''


def test_a_resume_with_guards_on_is_bitwise_exact(tmp_path):
    """caprl_tiny has guards on caprl_qa. Killed after step 2 and resumed, the run must log the same
    step-3 and step-4 rewards as an uninterrupted one: the guard forwards TRL's trainer step to
    caprl_qa, whose draws are seeded from it (#30 finding 2a; it drew from a call counter before)."""
    (tmp_path / "killer.py").write_text(KILL_AT_2)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    base = [str(Path(sys.executable).parent / "vlrl"), "train", "grpo", "--recipe", str(TINY / "caprl_tiny.yaml"),
            "max_steps=4", "save_steps=2", "log_completions=false"]

    def run(out, *extra):
        return subprocess.run([*base, f"output_dir={out}", *extra], env=env, capture_output=True, text=True, timeout=900)

    whole = run(tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr[-3000:]
    killed = run(tmp_path / "resumed", "callbacks=[killer:KillAfterStep2]")
    assert killed.returncode == -9, killed.stderr[-3000:]
    resumed = run(tmp_path / "resumed")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    from vlrl.evaluation.reports import find_trainer_state

    def rewards(out):
        hist = json.loads(find_trainer_state(out).read_text())["log_history"]
        return {h["step"]: (h["reward"], h.get("caprl_qa/qa_acc"), h.get("caprl_qa/guard/any")) for h in hist if "reward" in h}

    a, b = rewards(tmp_path / "whole"), rewards(tmp_path / "resumed")
    assert {3, 4} <= set(a) and {3, 4} <= set(b)
    assert [a[3], a[4]] == [b[3], b[4]]


def test_build_trainer_gives_hfrrf_behind_guards_its_length_cap_and_eos(tmp_path):
    """build_trainer sets the length cap and EOS ids on the reward it was given; behind guards they must
    reach hfrrf itself, or a completion cut off at the cap is paid 1.0 (#30 finding 2b)."""
    from vlrl.training.grpo import build_trainer
    from vlrl.training.runstate import prepare

    over = [f"output_dir={tmp_path / 'run'}", "rewards=[{name: hfrrf, guards: {policy: penalty, enabled: [self_praise]}}]",
            "data.source=builtin:tiny_math:4"]
    trainer, _ = build_trainer(prepare(load_recipe(TINY / "caprl_tiny.yaml", over)))
    (reward,) = trainer.reward_funcs
    assert reward.inner.max_completion_length == trainer.args.max_completion_length == 16
    assert reward.inner.eos_token_ids
    done = "<think>6*7</think><answer>42</answer>"
    eos = next(iter(reward.inner.eos_token_ids))
    values = reward(prompts=["p", "p"], completions=[[{"role": "assistant", "content": done}]] * 2,
                    completion_ids=[[5] * 16, [5] * 15 + [eos]], answer=["42", "42"])
    assert values == [0.0, 1.0]  # cut at the cap: truncated, unpaid; ended in EOS at the cap: paid


def test_the_completions_table_prints_control_characters_as_escapes(tmp_path, capfd):
    """A random policy writes NULs and terminal escapes; TRL's completions table must not print them
    raw into the training log (grep then calls the log binary), and the logged texts stay as written
    (#32 point 7). Drives the trainer's own ``log`` with log_completions on."""
    from vlrl.training.grpo import build_trainer
    from vlrl.training.runstate import prepare

    trainer, _ = build_trainer(prepare(load_recipe(TINY / "caprl_tiny.yaml", [f"output_dir={tmp_path / 'run'}"])))
    assert trainer.log_completions
    raw = "A red\x00 square\x1b[2J\x9b and\tmore"
    trainer._logs["prompt"].append([{"role": "user", "content": [{"type": "text", "text": "Describe\x07 it."}]}])
    trainer._logs["completion"].append([{"role": "assistant", "content": raw}])
    trainer._logs["rewards"]["caprl_qa"].append(0.5)
    trainer._logs["advantages"].append(0.0)
    capfd.readouterr()
    trainer.log({"loss": 0.0})
    printed = capfd.readouterr()
    text = printed.out + printed.err
    assert "\\x00" in text and "\\x1b" in text and "\\x07" in text  # shown, as escapes
    assert not any(ch in text for ch in "\x00\x07\x1b\x9b")
    assert trainer._logs["completion"][-1][0]["content"] == raw  # the logged data itself is untouched
