"""`vlrl demo --method vision-r1`: its problems, its rule-based stand-ins, its cold start (fast) and the quick run (slow)."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from tests.support.demo import ENV, FRESH_SEED, VLRL
from vlrl.core.prompts import render
from vlrl.demos.shapes.kit import problems as P
from vlrl.demos.shapes.kit import world as W
from vlrl.demos.shapes.standins import reasoning as R
from vlrl.methods.vision_r1.cold_start import answer_leak
from vlrl.methods.vision_r1.reward import HFRRFReward, extract_answer

CFG = W.WorldConfig()


def _truth(scene: W.Scene, question: str) -> str:
    """The answer recomputed from the scene facts, independently of the generator."""
    shapes = scene.shapes
    if question == "which shape is larger?":
        sizes = [s.size for s in shapes]
        return "same" if sizes[0] == sizes[1] else ("left" if sizes[0] == "large" else "right")
    colour = next(c for c in W.COLOURS if f" {c}" in question)
    n = len([s for s in shapes if s.colour == colour])
    return str(len(shapes) - n) if " not " in question else str(n)


def test_problems_match_the_scene_and_cover_every_kind():
    probs = P.make_problems(400, 5, CFG, "t")
    kinds = Counter(p["kind"] for _, p in probs)
    assert set(kinds) == set(P.KINDS) and min(kinds.values()) > 40
    for sc, p in probs:
        assert p["answer"] == _truth(sc, p["question"]), (sc, p)
        if p["kind"] == "larger":
            assert len(sc.shapes) == 2
    answers = Counter(p["answer"] for _, p in probs if p["kind"] == "count")
    assert {"0", "1", "2"} <= set(answers)  # not a constant answer the student could learn without looking
    assert [p for _, p in P.make_problems(20, 5, CFG, "t")] == [p for _, p in probs[:20]]  # reproducible
    with pytest.raises(ValueError, match="two shapes"):
        one = next(sc for sc, _ in probs if len(sc.shapes) == 1)
        P.make_problem(one, random.Random(0), "larger")


def test_item_questions_name_the_larger_shape_from_a_thirteen_answer_space():
    """The default question set: "what is the larger shape?" on two-shape scenes only, answered by
    the larger shape's colour and shape or "same", recomputed here from the scene; every one of the
    13 answers occurs, and HFRRF's checker grades them as words (case and a final stop aside)."""
    probs = P.make_problems(600, 5, CFG, "t", questions="items")
    assert {p["kind"] for _, p in probs} == {"larger_item"} and all(len(sc.shapes) == 2 for sc, _ in probs)
    for sc, p in probs:
        a, b = sc.shapes
        want = "same" if a.size == b.size else " ".join((a.colour, a.shape) if a.size == "large" else (b.colour, b.shape))
        assert p["answer"] == want, (sc, p)
        assert p["answer"] in P.scene_answers(sc, "larger_item") and len(P.scene_answers(sc, "larger_item")) <= 3
    answers = Counter(p["answer"] for _, p in probs)
    assert set(answers) == set(P.answer_space("larger_item")) and len(answers) == 13
    assert 0.35 < answers["same"] / len(probs) < 0.65
    assert [p for _, p in P.make_problems(50, 5, CFG, "t", questions="items")] == [p for _, p in probs[:50]]
    scorer = HFRRFReward()
    assert scorer(completions=["<think>x</think><answer>Red Circle.</answer>",
                               "<think>x</think><answer>red square</answer>",
                               "<think>x</think><answer>circle</answer>"], answer=["red circle"] * 3) == [1.0, 0.0, 0.0]
    assert P.chance_pass_at_k(3, 8) == pytest.approx(1 - (2 / 3) ** 8) and P.chance_pass_at_k(13, 1) == pytest.approx(1 / 13)


def test_item_mix_asks_larger_smaller_and_not_colour_and_the_reasoner_answers_each_by_three_routes():
    """The default question set: each kind's answer recomputed from the scene; the varied reasoner
    is right on every route without slips, and its slips name the wrong shape of the pair."""
    probs = P.make_problems(600, 6, CFG, "m", questions="item_mix")
    kinds = Counter(p["kind"] for _, p in probs)
    assert set(kinds) == set(P.QUESTION_SETS["item_mix"]) and min(kinds.values()) > 100, kinds
    clean, slippy = R.reasoner(styles="3"), R.reasoner(styles="3", slip="0.3")
    chains = Counter()
    for sc, p in probs:
        a, b = sc.shapes
        if p["kind"] == "other_item":
            colour = p["question"].removeprefix("which shape is not ").rstrip("?")
            assert [a.colour, b.colour].count(colour) == 1
            want = P.item_name(b if a.colour == colour else a)
        else:
            size = "large" if p["kind"] == "larger_item" else "small"
            want = "same" if a.size == b.size else P.item_name(a if a.size == size else b)
        assert p["answer"] == want and p["answer"] in P.answer_space(p["kind"]), (sc, p)
        out = _reason(clean, sc, p["question"])
        assert extract_answer(out) == p["answer"], (out, p)
        chains[(p["kind"], out.split(". ")[-1][:12])] += 1
        got = extract_answer(_reason(slippy, sc, p["question"]))
        if got != p["answer"]:
            assert got in {P.item_name(a), P.item_name(b)}, (p, got)
    assert all(sum(1 for k, _ in chains if k == kind) >= 3 for kind in kinds), chains


def test_a_glancing_reasoner_drops_the_chain_on_a_share_of_problems_drawn_apart_from_the_scene():
    """``glance=g``: about a share ``g`` of the answers come at a glance (no scene, no step), each
    with the answer the same reasoner reaches with its chain (slips included, so the answer filter
    keeps what it kept), the other chains unchanged; which problems glance follows neither the scene
    nor the question (the share is about the same for each question kind, each answer kind, the left
    shape's size and colour, and right and slipped answers)."""
    probs = P.make_problems(800, 7, CFG, "g", questions="item_mix")
    chained, glancing = R.reasoner(styles="3", slip="0.25"), R.reasoner(styles="3", slip="0.25", glance="0.5")
    by = Counter()
    for sc, p in probs:
        a, b = _reason(chained, sc, p["question"]), _reason(glancing, sc, p["question"])
        assert extract_answer(a) == extract_answer(b) and HFRRFReward()(completions=[b], answer=[extract_answer(a)]) == [1.0]
        glanced = b == R.format_response(R.at_a_glance(extract_answer(a)), extract_answer(a))
        assert glanced or b == a, (a, b)
        assert W.caption(sc) not in b if glanced else W.caption(sc) in b
        left = sc.shapes[0]
        for feature in (("kind", p["kind"]), ("same", p["answer"] == "same"), ("left size", left.size),
                        ("left colour", left.colour), ("right", extract_answer(a) == p["answer"])):
            by[(feature, glanced)] += 1
    share = {f: by[(f, True)] / (by[(f, True)] + by[(f, False)]) for f, _ in by}
    assert all(0.35 < v < 0.65 for f, v in share.items() if by[(f, True)] + by[(f, False)] >= 60), share
    assert sum(v for (f, glanced), v in by.items() if f[0] == "kind" and glanced) / len(probs) == pytest.approx(0.5, abs=0.05)
    with pytest.raises(ValueError, match="glance"):
        R.reasoner(glance="1.5")
    from vlrl.demos.shapes.vision_r1.runner import VR1Config

    with pytest.raises(ValueError, match="reasoner_glance"):
        VR1Config(reasoner_glance=-0.1)
    sc, p = probs[0]
    assert _reason(glancing, sc, p["question"]) == _reason(R.reasoner(styles="3", slip="0.25", glance="0.5"), sc, p["question"])


def _ask_vlm(vlm, img, prompt):
    return vlm([{"role": "user", "content": [{"type": "image", "image": img}, {"type": "text", "text": prompt}]}], None)


def test_stand_in_vlm_describes_without_the_answer_and_reasoner_solves_from_text_alone():
    vlm, reasoner = R.vlm(error_rate="0"), R.reasoner()
    scorer = HFRRFReward()
    for sc, p in P.make_problems(60, 2, CFG, "v"):
        img = W.render(sc, CFG)
        cot = _ask_vlm(vlm, img, render("cold_start_pseudo_cot", question=p["question"], answer=p["answer"], choices=[]))
        assert p["answer"] in cot and W.caption(sc) in cot
        desc = _ask_vlm(vlm, img, render("cold_start_description", question=p["question"], pseudo_cot=cot))
        assert desc == W.caption(sc) and not answer_leak(desc)
        # the reasoner gets text only (no image part at all)
        out = reasoner([{"role": "user", "content": render("cold_start_reason", description=desc,
                                                           question=p["question"], choices=[])}], None)
        assert scorer(completions=[out], answer=[p["answer"]]) == [1.0], (out, p)
    unreadable = reasoner([{"role": "user", "content": render("cold_start_reason", description="a nice picture",
                                                              question="how many red shapes are there?", choices=[])}], None)
    assert extract_answer(unreadable) == "unknown"


def test_overthinking_reasoner_restates_its_step_without_changing_the_answer():
    """``rechecks=N``: each chain re-states its own step 0..N extra times, every count occurs, the
    answer and the description are those of the plain reasoner, and the choice is reproducible."""
    plain, over = R.reasoner(), R.reasoner(rechecks="3")
    scorer = HFRRFReward()
    seen = Counter()
    for sc, p in P.make_problems(120, 6, CFG, "o"):
        msg = [{"role": "user", "content": render("cold_start_reason", description=W.caption(sc),
                                                  question=p["question"], choices=[])}]
        a, b = plain(msg, None), over(msg, None)
        assert extract_answer(a) == extract_answer(b) == p["answer"] and scorer(completions=[b], answer=[p["answer"]]) == [1.0]
        think_a = a.split("</think>")[0]
        step = think_a[len("<think>" + W.caption(sc)):].strip()
        extra = b.split("</think>")[0][len(think_a):]
        n = extra.count(" check: ")
        assert extra == f" check: {step}" * n, (a, b)
        assert over(msg, None) == b
        seen[n] += 1
    assert set(seen) == {0, 1, 2, 3} and min(seen.values()) > 10, seen
    with pytest.raises(ValueError, match="does not start with its description"):
        R.recheck("red shapes: 1.", "a small red square in the middle.", 2)


def _reason(reasoner, sc, question):
    return reasoner([{"role": "user", "content": render("cold_start_reason", description=W.caption(sc),
                                                        question=question, choices=[])}], None)


def test_varied_reasoner_takes_several_routes_and_slips_only_for_its_reasons():
    """``styles=3``: every kind is answered by three routes, all right without slips. ``slip``: the
    only wrong answers are the reasoned ones (an overlooked shape in a two-shape scene, counting the
    colour instead of the rest, sizes read right against left), and some slips land on the right
    answer by luck, so the answer filter keeps chains that took a wrong route."""
    clean, slippy = R.reasoner(styles="3"), R.reasoner(styles="3", slip="0.3")
    routes, wrong, lucky = Counter(), Counter(), 0
    for sc, p in P.make_problems(600, 8, CFG, "r"):
        out = _reason(clean, sc, p["question"])
        assert extract_answer(out) == p["answer"], (out, p)
        step = out.split("</think>")[0][len("<think>" + W.caption(sc)):]
        route = (2 if " so " in step or "larger." in step or "same size" in step
                 else 1 if "?" in step or "sizes:" in step else 0)
        routes[(p["kind"], route)] += 1
        slipped = _reason(slippy, sc, p["question"])
        assert slipped == _reason(slippy, sc, p["question"])  # reproducible
        got = extract_answer(slipped)
        if got == p["answer"]:
            lucky += slipped != out  # the same route (same draw), another chain: a slip that landed right
            continue
        wrong[p["kind"]] += 1
        shapes = sc.shapes
        colour = next((c for c in W.COLOURS if f" {c}" in p["question"]), None)
        if p["kind"] == "count":  # overlooked one of two shapes: the count of one of them
            assert len(shapes) == 2 and got in {str(int(s.colour == colour)) for s in shapes}, (p, got)
        elif p["kind"] == "not_count":  # counted the colour instead of the rest
            assert got == str(sum(s.colour == colour for s in shapes)), (p, got)
        else:  # right against left
            assert {got, p["answer"]} == {"left", "right"}, (p, got)
    assert len(routes) == 9 and min(routes.values()) > 20, routes  # three routes for each of the three kinds
    assert set(wrong) == set(P.KINDS) and 0.05 < sum(wrong.values()) / 600 < 0.3, wrong
    assert 0 < lucky < sum(wrong.values()), (lucky, wrong)


def test_varied_reasoner_names_the_larger_shape_by_three_routes_and_slips_to_the_smaller():
    clean, slippy = R.reasoner(styles="3"), R.reasoner(styles="3", slip="0.3")
    steps, wrong, lucky = set(), 0, 0
    probs = P.make_problems(300, 8, CFG, "r", questions="items")
    for sc, p in probs:
        out = _reason(clean, sc, p["question"])
        assert extract_answer(out) == p["answer"], (out, p)
        step = out.split("</think>")[0][len("<think>" + W.caption(sc)):]
        steps.add("left" if "larger:" in step else "named" if "larger one" in step or "same size" in step else "sizes")
        got = extract_answer(_reason(slippy, sc, p["question"]))
        if got != p["answer"]:  # the slip names the smaller shape
            a, b = sc.shapes
            wrong += 1
            assert a.size != b.size and got == P.item_name(a if a.size == "small" else b), (p, got)
        else:
            lucky += _reason(slippy, sc, p["question"]) != out
    assert steps == {"left", "named", "sizes"} and 0.05 < wrong / len(probs) < 0.3
    assert lucky == 0  # naming the smaller shape is wrong whenever it shows, so the filter drops every slip
    assert R.solve(probs[0][0].items, P.LARGER_ITEM)[1] == probs[0][1]["answer"]


def test_heldout_problems_share_no_layout_question_pair_or_image_with_any_training_set(tmp_path):
    """The held-out split against the problems the cold start was built from and the RL problems,
    re-drawn and rendered here: no layout, so no (layout, question) pair, in common and no
    pixel-identical image. Drawn naively from fresh scene seeds over the whole world, the held-out
    problems would share many pairs."""
    from vlrl.core.pipeline import read_jsonl
    from vlrl.demos.shapes.vision_r1.runner import VR1Config, write_problems, write_rows, write_splits

    cfg = VR1Config.make(seed=3, quick=True)
    info = write_splits(tmp_path / "data", cfg)
    cold = write_problems(tmp_path / "cold", "coldstart", cfg.cold_start_problems, cfg.seed, cfg.warm.world, cfg.questions)

    def load(path: Path):
        rows = list(read_jsonl(path))
        pairs = {(json.dumps(W.Scene.from_dict(r["scene"]).to_dict()["items"]), r["question"]) for r in rows}
        pixels = {hashlib.sha1(Image.open(path.parent / r["image"]).tobytes()).hexdigest() for r in rows}
        return rows, pairs, pixels

    held, held_pairs, held_pixels = load(tmp_path / "data" / "eval.jsonl")
    assert len(held) == cfg.eval_problems == info["eval"] and len(held_pixels) > 0.9 * len(held)
    held_layouts = {p[0] for p in held_pairs}
    for path in (cold, tmp_path / "data" / "train.jsonl"):
        _, pairs, pixels = load(path)
        assert not held_pairs & pairs and not held_pixels & pixels, path
        assert not held_layouts & {p[0] for p in pairs}, path
    naive = write_rows(tmp_path / "naive", "eval", P.make_problems(cfg.eval_problems, cfg.seed, cfg.warm.world, "eval",
                                                                 questions=cfg.questions),
                       cfg.warm.world)
    assert len(load(naive)[1] & load(cold)[1]) > 0.2 * cfg.eval_problems  # the overlap the split removes
    assert info["eval_skipped_as_seen"] == 0  # the layout split leaves the pair check nothing to skip
    chance = info["chance"]  # a guesser's pass@k on these problems, beside which the models' is read
    assert chance["answer_space"] == {"larger_item": 13, "smaller_item": 13, "other_item": 12} and chance["uniform"]["pass@8"] < 0.5
    assert chance["uniform"]["pass@1"] < chance["scene_guesser"]["pass@1"] < chance["scene_guesser"]["pass@8"] < 1


def test_stand_in_vlm_mis_perceives_at_its_error_rate():
    scenes = [sc for sc, _ in P.make_problems(200, 4, CFG, "e")]
    wrong = sum(_ask_vlm(R.vlm(error_rate="0.3"), W.render(sc, CFG), "Describe.") != W.caption(sc) for sc in scenes)
    assert 0.18 < wrong / len(scenes) < 0.42


def test_solve_needs_every_fact_stated():
    sc = W.Scene("s", [W.Item("left", "circle", "red", "large"), W.Item("right", "square", "red", "small")])
    assert R.solve(sc.items, "how many shapes are not red?")[1] == "0"
    assert R.solve(sc.items, "how many red shapes are there?")[1] == "2"
    assert R.solve(sc.items, "which shape is larger?")[1] == "left"
    assert R.solve([W.Item("left", "circle", None, "large"), sc.items[1]], "how many red shapes are there?") is None
    assert R.solve(sc.items, "what is the meaning of this?") is None


def test_cold_start_keeps_only_correct_chains(tmp_path):
    """The project's cold start with both stand-ins: mis-perceived samples are rejected as wrong answers."""
    from vlrl.core.pipeline import read_jsonl
    from vlrl.demos.shapes.vision_r1.runner import write_problems
    from vlrl.methods.vision_r1.cold_start import cold_start

    src = write_problems(tmp_path / "p", "cs", 80, 1, CFG)
    stats = cold_start(str(src), "py:vlrl.demos.shapes.standins.reasoning:vlm?error_rate=0.4", "py:vlrl.demos.shapes.standins.reasoning:reasoner",
                       tmp_path / "cs", batch_size=32, seed=1)
    assert stats["total"] == 80 and 0 < stats["rejected"] < 80
    assert set(stats["reject_reasons"]) == {"wrong_answer"}
    gold = {r["id"]: r["answer"] for r in read_jsonl(src)}
    kept = list(read_jsonl(tmp_path / "cs" / "sft.jsonl"))
    assert len(kept) == stats["kept"]
    assert HFRRFReward()(completions=[r["response"] for r in kept], answer=[gold[r["id"]] for r in kept]) == [1.0] * len(kept)


def test_metrics_have_every_key_the_issue_names():
    from vlrl.demos.shapes.vision_r1.runner import VR1Config, build_metrics

    def ev(acc, fmt, toks):
        return {"n": 10, "accuracy": acc, "accuracy_strict_format": acc, "accuracy_when_formatted": acc / fmt,
                "format_failure_rate": 1 - fmt,
                "truncation_rate": 0.0, "completion_tokens": {"mean": toks},
                "pass_at_k": {"pass@1": acc - 0.1, "pass@4": acc + 0.1, "pass@8": acc + 0.2},
                "sampled_right_share": {"where_greedy_right": 0.8, "where_greedy_wrong": acc / 4},
                "by_group": {"count": {"accuracy": acc, "pass_at_k": {"pass@1": acc, "pass@4": acc, "pass@8": 1.0}}}}

    cfg = VR1Config.make(quick=True)
    hist = [{"step": i + 1, "stage": 1 + (i >= 12), "reward": i / 24} for i in range(24)]
    m = build_metrics(cfg, {"before": ev(0.4, 0.9, 50), "ptst": ev(0.7, 1.0, 45), "single": ev(0.6, 0.97, 48)},
                      hist, hist, {"cold_start": {"kept": 9, "total": 10}, "sft": {"global_step": 3}}, {"a": 1.0})
    for key in ("method", "acc_before", "acc_after", "reward_first", "reward_last", "wall_seconds", "seed",
                "format_before", "format_after", "mean_tokens_before", "mean_tokens_after", "single_stage_acc_after"):
        assert key in m, key
    assert m["method"] == "vision-r1" and m["gain"] == pytest.approx(0.3) and m["single_stage_acc_after"] == 0.6
    assert m["acc_formatted_before"] == pytest.approx(0.4444, abs=1e-4) and m["acc_formatted_after"] == 0.7
    assert m["reward_first"] < m["reward_last"]
    assert m["pass_at_k"]["before"] == {"pass@1": 0.3, "pass@4": 0.5, "pass@8": 0.6}
    assert m["pass_at_k"]["ptst"]["pass@8"] == 0.9 and m["pass_at_k"]["single"]["pass@8"] == 0.8
    lo, hi = m["acc_after_ci"]  # 7 of 10 right: a wide Wilson interval around 0.7
    assert lo < 0.7 < hi and hi - lo > 0.3 and m["acc_before_ci"][0] < m["acc_before"]
    assert m["pass_at_k_by_kind"]["before"]["count"]["pass@8"] == 1.0
    assert m["pass8_minus_greedy_before"] == pytest.approx(0.2) and m["pass8_minus_greedy_after"] == pytest.approx(0.2)
    assert m["sampled_right_share"]["before"]["where_greedy_wrong"] == 0.1 and m["sampled_right_share"]["ptst"]["where_greedy_wrong"] == 0.175
    assert set(m["trained_on"]) == {"captioner", "student", "ptst", "single"}
    # the baseline gets as many steps and sampled completions as PTST
    cap, group, steps = cfg.single_stage()
    assert steps == cfg.total_steps and group * steps == sum(g * n for _, g, n in cfg.stages)
    assert cap == cfg.stages[-1][0]
    assert json.dumps(m)


def test_out_folder_refuses_a_run_with_other_settings(tmp_path):
    from vlrl.demos.shapes.kit.base import DemoError, prepare_out
    from vlrl.demos.shapes.vision_r1.runner import VR1Config

    out = tmp_path / "run"
    quick = VR1Config.make(quick=True)
    assert prepare_out(out, quick, force=False) is None
    assert prepare_out(out, quick, force=False) is None  # same settings: resumes
    with pytest.raises(DemoError, match="other settings"):
        prepare_out(out, VR1Config.make(quick=False), force=False)
    assert VR1Config.make(seed=1).student_key() == VR1Config.make(seed=0).student_key()  # seed is in the folder name
    assert VR1Config(sft_steps=10).student_key() != VR1Config().student_key()
    assert VR1Config.make(rechecks=3).student_key() != VR1Config().student_key()  # another cold start, another student
    assert VR1Config(reasoner_glance=0.5).student_key() != VR1Config().student_key()
    with pytest.raises(DemoError, match="reasoner_rechecks: 0 there, 3 now"):
        prepare_out(out, VR1Config.make(quick=True, rechecks=3), force=False)


def test_a_run_folder_from_before_rechecks_existed_still_resumes(tmp_path):
    """Default settings keep the fingerprint they had before ``reasoner_rechecks`` and ``reasoner_glance`` were added."""
    from dataclasses import asdict

    from vlrl.demos.shapes.kit.base import prepare_out
    from vlrl.demos.shapes.vision_r1.runner import VR1Config

    cfg = VR1Config.make(quick=True)
    old = asdict(cfg)
    del old["reasoner_rechecks"], old["reasoner_glance"]  # a folder from before either existed
    out = tmp_path / "run"
    out.mkdir()
    old_fp = hashlib.sha1(json.dumps(old, sort_keys=True, default=str).encode()).hexdigest()[:12]
    (out / "demo.json").write_text(json.dumps({"fingerprint": old_fp, "seed": 0, "quick": True, "config": old}))
    assert prepare_out(out, cfg, force=False) is None
    with pytest.raises(ValueError, match="rechecks"):
        VR1Config.make(rechecks=-1)


def test_rechecks_flag_is_for_vision_r1_only(tmp_path):
    res = subprocess.run([VLRL, "demo", "--rechecks", "2", "--quick", "--out", str(tmp_path / "x")], env=ENV,
                         capture_output=True, text=True)
    assert res.returncode == 2 and "vision-r1 only" in res.stderr


# -- slow: the quick demo ------------------------------------------------------------------------



@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_vision_r1_quick_demo(tmp_path):
    """The quick demo end to end. Where the issue's learning goal (+0.15 held-out accuracy after
    PTST) is not reached, the test says so as an expected failure with the measured numbers, pass@k
    and a guesser's pass@k included, instead of hiding the goal (docs/demo-vision-r1.md)."""
    out = tmp_path / "vr1"
    res = subprocess.run([VLRL, "demo", "--method", "vision-r1", "--quick", "--seed", str(FRESH_SEED), "--out", str(out)],
                         env=ENV, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    assert m["method"] == "vision-r1" and m["seed"] == FRESH_SEED
    assert m["format_before"] >= 0.95 and m["format_after"] >= 0.95, m
    assert 0 <= m["single_stage_acc_after"] <= 1 and m["reward_first"] is not None and m["reward_last"] is not None
    assert m["cold_start"]["kept"] > 0.8 * m["cold_start"]["total"]
    for name in ("before", "ptst", "single"):  # pass@k beside greedy, overall and per kind
        t = m["pass_at_k"][name]
        assert set(t) == {"pass@1", "pass@4", "pass@8"} and t["pass@1"] <= t["pass@4"] <= t["pass@8"], m["pass_at_k"]
        assert set(m["pass_at_k_by_kind"][name]) == set(P.QUESTION_SETS[m["questions"]])
        # the shares split the same samples by the greedy answer: their weighted mean is pass@1
        sh = m["sampled_right_share"][name]
        n_r, n_w = sh["problems_where_greedy_right"], sh["problems_where_greedy_wrong"]
        assert n_r + n_w == m["eval_problems"]
        mean = ((sh["where_greedy_right"] or 0) * n_r + (sh["where_greedy_wrong"] or 0) * n_w) / (n_r + n_w)
        assert mean == pytest.approx(t["pass@1"], abs=1e-3)
    assert m["eval_samples"] == 8 and m["splits"]["eval"] == m["eval_problems"]
    assert m["chance_pass_at_k"]["uniform"]["pass@8"] < 0.5  # 13 answers: pass@8 near 1 is not a guesser's
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 3 and "pass@8" in page and "Mean share of right samples" in page
    again = subprocess.run([VLRL, "demo", "--method", "vision-r1", "--quick", "--seed", str(FRESH_SEED), "--out", str(out)],
                           env=ENV, capture_output=True, text=True)
    assert again.returncode == 0 and "already holds a finished demo run" in again.stdout
    # No regression: RL may not reach the goal here, but it must not break what the cold start
    # taught. Judged per problem (the same held-out problems before and after), not by a fixed
    # margin on two accuracies of 90 problems each, whose noise alone is about 0.05.
    for run in ("ptst", "single"):
        p = _paired_worse_p(out / "eval" / "before" / "predictions.jsonl", out / "eval" / run / "predictions.jsonl")
        assert p > 0.01, f"{run} is significantly worse than before RL (one-sided sign test p={p:.4f}): {m}"
    if m["acc_after"] < m["acc_before"] + 0.15:
        pytest.xfail(f"learning goal not reached: held-out accuracy {m['acc_before']} -> {m['acc_after']} "
                     f"(single-stage {m['single_stage_acc_after']}); the goal is +0.15; pass@k before "
                     f"{m['pass_at_k']['before']}, after PTST {m['pass_at_k']['ptst']}; a guesser's "
                     f"{m['chance_pass_at_k']}")


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_vision_r1_quick_demo_learns_to_stop_overthinking(tmp_path):
    """``--rechecks 3``: the cold start's reasoner overthinks, so the SFT student re-states its step
    until many chains run past the length cap. RL with ``hfrrf`` (truncated = 0) must remove that
    habit: +0.15 held-out accuracy with format >= 0.95 and shorter outputs. What it must not do is
    buy that by answering worse: on the problems well-formed both before and after, the paired
    sign test must not call it worse. (It is not required to answer them *better*: docs/demo-vision-r1.md
    measures that it does not.)"""
    out = tmp_path / "vr1-over"
    res = subprocess.run([VLRL, "demo", "--method", "vision-r1", "--quick", "--rechecks", "3", "--seed", str(FRESH_SEED),
                          "--out", str(out)], env=ENV, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    assert m["reasoner_rechecks"] == 3 and m["truncation_before"] > 0.1, m  # the premise: the student overthinks
    assert m["acc_after"] >= m["acc_before"] + 0.15 and m["format_after"] >= 0.95, m
    assert m["mean_tokens_after"] < m["mean_tokens_before"] and m["truncation_after"] < m["truncation_before"], m

    def rechecks(run: str) -> float:  # mean re-checks per output, inside its think block
        rows = [json.loads(x) for x in (out / "eval" / run / "predictions.jsonl").read_text().splitlines()]
        return sum(r["output"].split("</think>")[0].count(" check: ") for r in rows) / len(rows)

    assert rechecks("before") >= 1.5 and rechecks("ptst") < rechecks("before") / 2, (rechecks("before"), rechecks("ptst"))
    p = _paired_worse_p(out / "eval" / "before" / "predictions.jsonl", out / "eval" / "ptst" / "predictions.jsonl",
                        only_formatted=True)
    assert p > 0.01, f"PTST answers the well-formed problems worse (p={p:.4f}): {m}"


def _paired_worse_p(before: Path, after: Path, only_formatted: bool = False) -> float:
    """One-sided exact sign test (McNemar) that ``after`` gets more of the same problems wrong.

    Among problems whose correctness changed, ``lost`` went right -> wrong and ``won`` wrong ->
    right; with no real change each is a fair coin, so p = P(X >= lost), X ~ Binomial(lost + won, 1/2).
    ``only_formatted`` keeps the problems whose output is well formed in both files.
    """
    from math import comb

    rows = [{r["id"]: r for r in map(json.loads, f.read_text().splitlines())} for f in (before, after)]
    assert rows[0].keys() == rows[1].keys() and rows[0]
    keep = [k for k in rows[0] if not only_formatted or (rows[0][k]["format_ok"] and rows[1][k]["format_ok"])]
    right = [{k: bool(r[k]["correct"]) for k in keep} for r in rows]
    lost = sum(right[0][k] and not right[1][k] for k in right[0])
    won = sum(right[1][k] and not right[0][k] for k in right[0])
    n = lost + won
    return sum(comb(n, i) for i in range(lost, n + 1)) / 2**n if n else 1.0


def test_the_paired_check_separates_noise_from_a_real_regression(tmp_path):
    """The no-regression check above: a net loss of 5 of 90 problems among 11 changes is noise; a
    loss of 15 with none won is not."""
    def write(name: str, correct: list[bool]) -> Path:
        f = tmp_path / f"{name}.jsonl"
        f.write_text("".join(json.dumps({"id": str(i), "correct": c}) + "\n" for i, c in enumerate(correct)))
        return f

    before = [True] * 53 + [False] * 37
    noisy = [False] * 8 + [True] * 45 + [True] * 3 + [False] * 34  # 8 lost, 3 won: 0.589 -> 0.533
    broken = [False] * 15 + [True] * 38 + [False] * 37  # 15 lost, none won
    assert _paired_worse_p(write("b", before), write("n", noisy)) > 0.05
    assert _paired_worse_p(write("b2", before), write("x", broken)) < 0.001
