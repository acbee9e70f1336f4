"""Vision-R1 cold start: modality bridging, answer/format filtering, exactly-once resume, SFT on the output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from tests.support.paths import ROOT
from tests.support.scripted import Scripted


def _text(req) -> str:
    c = req.messages[-1]["content"]
    return c if isinstance(c, str) else "".join(p.get("text", "") for p in c if p.get("type") == "text")


def _has_image(req) -> bool:
    c = req.messages[-1]["content"]
    return isinstance(c, list) and any(p.get("type") == "image" for p in c)


def vlm_fn(req):
    t = _text(req)
    if "Correct answer:" in t:
        return f"The image shows a shape. Reasoning for {req.id}: count the sides."
    assert "<reasoning>" in t and f"Reasoning for {req.id}" in t  # step 2 is guided by step 1
    return f"DESCRIPTION-{req.id}: a red square with four equal sides."


REASONER = {
    "r0": "<think>A square has 4 sides.</think><answer>4</answer>",  # kept
    "r1": "A square has 4 sides.</think>\n<answer>4</answer>",  # R1 style, opening tag restored: kept
    "r2": "<think>Maybe 3.</think><answer>3</answer>",  # wrong answer
    "r3": "The answer is 4.",  # bad format (even though the answer is right)
    "r4": None,  # reasoner error
    "r5": "<think>Option B is square.</think><answer>B</answer>",  # multiple choice: kept
}


def reasoner_fn(req):
    assert not _has_image(req)  # the reasoner never sees the image
    assert f"DESCRIPTION-{req.id}" in _text(req)
    return REASONER[req.id]


def _write_input(tmp_path: Path, n_extra_bad: bool = True) -> Path:
    (tmp_path / "imgs").mkdir(exist_ok=True)
    Image.new("RGB", (32, 32), "red").save(tmp_path / "imgs" / "sq.png")
    (tmp_path / "imgs" / "broken.png").write_bytes(b"not an image")
    recs = [{"id": f"r{i}", "image": "imgs/sq.png", "question": f"How many sides does shape {i} have?", "answer": "4"} for i in range(5)]
    recs.append({"id": "r5", "image": "imgs/sq.png", "question": "Which shape is it?", "answer": "B", "choices": ["circle", "square"]})
    if n_extra_bad:
        recs.append({"id": "bad-img", "image": "imgs/broken.png", "question": "q?", "answer": "1"})
        recs.append({"id": "no-answer", "image": "imgs/sq.png", "question": "q?"})
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return src


def test_cold_start_keeps_only_verified_well_formed_samples(tmp_path):
    from vlrl.methods.vision_r1.cold_start import cold_start

    src = _write_input(tmp_path)
    vlm, rsn = Scripted("vlm", vlm_fn), Scripted("reasoner", reasoner_fn)
    out = tmp_path / "out"
    stats = cold_start(str(src), vlm, rsn, out, batch_size=4)
    assert stats["kept"] == 3 and stats["quarantined"] == 2 and stats["total"] == 8
    # the reasoner error is transient: undecided, retried on the next run, never written as rejected
    assert stats["reject_reasons"] == {"wrong_answer": 1, "bad_format": 1}
    assert stats["retry"] == 1 and stats["retry_reasons"] == {"reasoner_error": 1} and stats["failed_this_run"] == 1
    kept = {r["id"]: r for r in map(json.loads, (out / "sft.jsonl").read_text().splitlines())}
    assert set(kept) == {"r0", "r1", "r5"}
    assert kept["r1"]["response"].startswith("<think>A square") and kept["r1"]["response"].endswith("<answer>4</answer>")
    assert kept["r5"]["choices"] == ["circle", "square"]
    for r in kept.values():
        assert Path(src.parent / r["image"]).is_file() and r["question"] and r["description"].startswith("DESCRIPTION")
    assert all(_has_image(r) for r in vlm.requests) and len(vlm.requests) == 12  # 6 readable × 2 VLM steps
    assert json.loads((out / "stats.json").read_text()) == stats
    q = [json.loads(x) for x in (out / "quarantine.jsonl").read_text().splitlines()]
    assert {x["id"] for x in q} == {"bad-img", "no-answer"}

    # rerun: decided samples are not asked again and nothing is written twice; the transient error is retried
    vlm2, rsn2 = Scripted("vlm", vlm_fn), Scripted("reasoner", reasoner_fn)
    assert cold_start(str(src), vlm2, rsn2, out, batch_size=4) == stats
    assert vlm2.requests == [] and [r.id for r in rsn2.requests] == ["r4"]
    fixed = Scripted("reasoner", lambda req: "<think>A square has 4 sides.</think><answer>4</answer>")
    again = cold_start(str(src), Scripted("vlm", vlm_fn), fixed, out, batch_size=4)
    assert again["kept"] == 4 and again["retry"] == 0 and [r.id for r in fixed.requests] == ["r4"]


SCRIPT = r'''
import sys, time
sys.path.insert(0, {root!r})
from tests.support.scripted import Scripted
from tests.methods.vision_r1.test_cold_start import vlm_fn
from vlrl.methods.vision_r1.cold_start import cold_start

def slow_vlm(req):
    time.sleep(0.15)
    return vlm_fn(req)

def reasoner(req):
    return "<think>x</think><answer>4</answer>" if int(req.id[1:]) % 2 == 0 else "<think>x</think><answer>5</answer>"

cold_start({src!r}, Scripted("vlm", slow_vlm), Scripted("reasoner", reasoner), {out!r}, batch_size=1)
'''


def test_cold_start_exactly_once_after_kill_9(tmp_path):
    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (16, 16), "blue").save(tmp_path / "imgs" / "a.png")
    n = 14
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{i}", "image": "imgs/a.png", "question": f"q{i}?", "answer": "4"}) + "\n" for i in range(n)))
    out = tmp_path / "out"
    script = tmp_path / "run.py"
    script.write_text(SCRIPT.format(root=str(ROOT), src=str(src), out=str(out)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    done = lambda: sum(len(p.read_text().splitlines()) for p in (out / "sft.jsonl", out / "rejected.jsonl") if p.exists())  # noqa: E731
    while done() < 4 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 4 <= done() < n
    rerun = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    kept = [json.loads(x)["id"] for x in (out / "sft.jsonl").read_text().splitlines()]
    rejected = [json.loads(x)["id"] for x in (out / "rejected.jsonl").read_text().splitlines()]
    assert sorted(kept + rejected) == sorted(f"r{i}" for i in range(n))  # every record exactly once
    assert set(kept) == {f"r{i}" for i in range(0, n, 2)}
    stats = json.loads((out / "stats.json").read_text())
    assert stats["kept"] == n // 2 and stats["total"] == n


@pytest.mark.slow
def test_cold_start_cli_with_tiny_models_then_sft(tmp_path):
    """End to end through the CLI with real (random) tiny models, then SFT on a verified set."""
    from typer.testing import CliRunner

    from vlrl.cli import app
    from vlrl.training.recipe import load_recipe
    from vlrl.training.sft import run_sft

    out = tmp_path / "cs"
    args = ["data", "cold-start", "--input", "builtin:tiny_math:3", "--vlm", "hf:tiny:qwen2_5_vl", "--reasoner", "hf:tiny:qwen2",
            "--out", str(out), "--vlm-max-tokens", "8", "--reasoner-max-tokens", "8"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    stats = json.loads((out / "stats.json").read_text())
    assert stats["total"] == 3 and stats["kept"] + stats["rejected"] == 3  # random weights: junk is filtered, never kept blindly
    assert CliRunner().invoke(app, args).exit_code == 0
    assert json.loads((out / "stats.json").read_text()) == stats

    # SFT on a verified cold-start set (the scripted run's output format)
    src = _write_input(tmp_path, n_extra_bad=False)
    cs = tmp_path / "verified"
    from vlrl.methods.vision_r1.cold_start import cold_start

    cold_start(str(src), Scripted("vlm", vlm_fn), Scripted("reasoner", reasoner_fn), cs)
    recipe = load_recipe(ROOT / "train" / "recipes" / "tiny" / "sft_tiny.yaml",
                         [f"output_dir={tmp_path / 'sft'}", f"data.source={cs / 'sft.jsonl'}", "max_steps=2"])
    m = run_sft(recipe)
    assert m["rows"] == 3 and m["global_step"] == 2


def test_missing_input_fails_before_any_model_is_loaded(tmp_path):
    from vlrl.methods.vision_r1.cold_start import cold_start

    with pytest.raises(ValueError, match="--input .* does not exist"):
        # the specs point nowhere: reaching load_backend would raise a different error
        cold_start(str(tmp_path / "nope.jsonl"), f"hf:{tmp_path}/no-vlm", f"hf:{tmp_path}/no-lm", tmp_path / "out")


def test_leaks_are_rejected_targets_grounded_and_the_judge_filters(tmp_path):
    from vlrl.methods.vision_r1.cold_start import answer_leak, cold_start, ground_wording

    assert answer_leak("A red square. The answer is 4.") and answer_leak("Option B is correct: it is a square.")
    assert not answer_leak("A red square with four equal sides labelled 4 cm.")
    assert ground_wording("According to the description, the square has 4 sides. The description says it is red.") == (
        "In the image, the square has 4 sides. The image shows it is red.")

    def vlm(req):
        t = _text(req)
        if "Correct answer:" in t:
            return f"Reasoning for {req.id}: count the sides."
        if req.id == "r0":
            return f"DESCRIPTION-{req.id}: a red square. The answer is 4."  # leaks
        return f"DESCRIPTION-{req.id}: a red square with four equal sides."

    def rsn(req):
        return "<think>According to the description, a square has 4 sides.</think><answer>4</answer>"

    def judge(req):
        return '{"consistent": false, "reason": "skips a step"}' if req.id == "r2" else (
            None if req.id == "r3" else '{"consistent": true, "reason": "ok"}')

    src = _write_input(tmp_path, n_extra_bad=False)
    out = tmp_path / "o"
    stats = cold_start(str(src), Scripted("vlm", vlm), Scripted("reasoner", rsn), out, batch_size=8,
                       consistency_judge=Scripted("judge", judge))
    assert stats["reject_reasons"] == {"answer_leak": 1, "inconsistent": 1, "wrong_answer": 1}  # r5 wants B
    assert stats["retry_reasons"] == {"judge_error": 1}
    kept = [json.loads(x) for x in (out / "sft.jsonl").read_text().splitlines()]
    assert {k["id"] for k in kept} == {"r1", "r4"}
    assert all(k["response"].startswith("<think>In the image, a square") for k in kept)


def test_an_empty_reply_is_transient_never_a_rejection(tmp_path):
    """An empty VLM or reasoner reply says nothing about the sample: it is retried by the next run (not
    replayed from the cache), never stored as an ``empty_pseudo_cot`` rejection (#30 finding 8). A reply
    of whitespace only is an answer, a bad one: that is the sample's decided rejection."""
    from vlrl.methods.vision_r1.cold_start import cold_start

    src = _write_input(tmp_path, n_extra_bad=False)
    out = tmp_path / "out"

    def flaky_vlm(req):
        if "Correct answer:" in _text(req) and req.id in ("r0", "r5"):
            return "" if req.id == "r0" else " \n "
        return vlm_fn(req)

    def flaky_reasoner(req):
        return "" if req.id == "r1" else reasoner_fn(req)

    def good_reasoner(req):
        return "<think>A square has 4 sides.</think><answer>4</answer>" if req.id in ("r0", "r1", "r4") else reasoner_fn(req)

    first = cold_start(str(src), Scripted("vlm", flaky_vlm), Scripted("reasoner", flaky_reasoner), out, batch_size=6)
    assert first["retry_reasons"] == {"vlm_error": 1, "reasoner_error": 2}  # r0's VLM; r1's and r4's reasoner
    rejected = {json.loads(x)["id"]: json.loads(x)["reason"] for x in (out / "rejected.jsonl").read_text().splitlines()}
    assert rejected == {"r2": "wrong_answer", "r3": "bad_format", "r5": "empty_pseudo_cot"}
    vlm = Scripted("vlm", vlm_fn)
    again = cold_start(str(src), vlm, Scripted("reasoner", good_reasoner), out, batch_size=6)
    assert {r.id for r in vlm.requests} == {"r0"}  # the empty reply was not cached: asked again
    kept = {json.loads(x)["id"] for x in (out / "sft.jsonl").read_text().splitlines()}
    assert kept == {"r0", "r1", "r4"} and again["retry"] == 0


def test_the_documented_cold_start_command_checks_consistency():
    """The answer check alone keeps '3*2 = 5, so the answer is 6'; the documented command must include
    the judge that filters such chains (#30 finding 8)."""
    from vlrl.methods.vision_r1.cold_start import judge_sample

    assert judge_sample("<think>3*2 = 5, so the answer is 6.</think><answer>6</answer>", "6")[:2] == (True, True)
    docs = (ROOT / "docs" / "training.md").read_text()
    commands = [line for line in docs.splitlines() if "vlrl data cold-start --input" in line]
    assert commands and all("--consistency-judge" in c for c in commands)
