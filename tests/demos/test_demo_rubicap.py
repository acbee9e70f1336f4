"""`vlrl demo --method rubicap`: the world oracle, the judge's requests, the reward block and the
metrics (fast), and the quick demo end to end (slow)."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from vlrl.demos.shapes.kit import world as W
from vlrl.demos.shapes.standins.committee import facts_of, rubric_for
from vlrl.demos.shapes.tiny_models.rubric_judge import (
    FAIL,
    PASS,
    caption_variant,
    criterion_fact,
    judge_examples,
    oracle_verdict,
    request_renderer,
    scene_rubrics,
)

CFG = W.WorldConfig()


def _scenes(n=150, seed=5):
    return W.make_scenes(n, seed, CFG, prefix="rt")


# -- the oracle --------------------------------------------------------------------------------


def test_oracle_reads_every_criterion_the_real_writer_and_schema_write():
    rng = random.Random(0)
    kinds = set()
    for sc in _scenes():
        truth = facts_of(sc.items)
        _, rubrics = scene_rubrics(sc, rng)
        for rub in rubrics:
            mode, key, value = criterion_fact(rub["criterion"])  # raises on unknown wording
            kinds.add((rub["kind"], mode))
            assert mode == ("contradicts" if rub["kind"] == "regression" else "states")
            # the full, true caption meets a criterion exactly when the consensus fact is true,
            # and never contradicts a true fact
            full = W.caption(sc)
            if mode == "states":
                assert oracle_verdict(rub["criterion"], full) == (truth.get(key) == value)
            elif truth.get(key) == value:
                assert not oracle_verdict(rub["criterion"], full)
    assert {("criterion", "states"), ("regression", "contradicts")} <= kinds


def test_oracle_against_the_scene_facts():
    rng = random.Random(1)
    for sc in _scenes(100, 6):
        truth = facts_of(sc.items)
        for key, value in truth.items():
            criterion, _ = rubric_for(key, value)
            assert oracle_verdict(criterion, W.caption(sc))
            if key[1] == "count":
                continue
            # the attribute left out: not met; stated wrongly: not met, and the regression pitfall is
            dropped = [W.Item(**{**it.__dict__}) for it in sc.items]
            wrong = [W.Item(**{**it.__dict__}) for it in sc.items]
            slot = next(i for i, it in enumerate(sc.items) if it.position == key[0])
            setattr(dropped[slot], key[1], None)
            pool = {"shape": W.SHAPES, "colour": tuple(W.COLOURS), "size": W.SIZES}[key[1]]
            setattr(wrong[slot], key[1], rng.choice([v for v in pool if v != value]))
            fact = f"The {key[1]} of the shape {W.WHERE[key[0]]} is {value}."
            regression = f"States something that contradicts this fact about the image: {fact}"
            assert not oracle_verdict(criterion, W.caption_from_items(dropped))
            assert not oracle_verdict(regression, W.caption_from_items(dropped))
            assert not oracle_verdict(criterion, W.caption_from_items(wrong))
            assert oracle_verdict(regression, W.caption_from_items(wrong))
            # a run-on that a strict reader cannot parse states nothing
            assert not oracle_verdict(criterion, W.caption(sc).rstrip(".") + " on a red circle on")


def test_oracle_rejects_text_it_does_not_know():
    with pytest.raises(ValueError):
        criterion_fact("The caption mentions a purple unicorn.")
    with pytest.raises(ValueError):
        criterion_fact("The caption says the shape on the left is purple.")


def test_training_examples_are_varied_and_balanced():
    seen = []
    ex = judge_examples(1500, 0, "bal", CFG, lambda c, r: (seen.append(c), f"{r['criterion']}|{c}")[1])
    assert len(ex) == 1500
    labels = [e["label"] for e in ex]
    assert 0.3 < sum(labels) / len(labels) < 0.6
    for kind in ("criterion", "regression"):
        mine = [e["label"] for e in ex if e["kind"] == kind]
        assert len(mine) > 100 and 0.15 < sum(mine) / len(mine) < 0.85, kind
    unparsed = sum(W.parse_caption(c) is None for c in seen)
    assert 0.05 < unparsed / len(seen) < 0.3  # garbled captions are there, but not most


def test_caption_variants_cover_every_kind_of_mistake():
    rng = random.Random(2)
    sc = W.Scene("s", [W.Item("left", shape="circle", colour="red", size="large"),
                       W.Item("right", shape="square", colour="blue", size="small")])
    truth = facts_of(sc.items)
    got = {"full": 0, "dropped": 0, "wrong": 0, "invented": 0, "garbled": 0}
    for _ in range(400):
        items = W.parse_caption(caption_variant(sc, rng))
        if items is None:
            got["garbled"] += 1
            continue
        f = facts_of(items)
        if f[("scene", "count")] != "two":
            got["invented"] += 1
        elif any(f.get(k) not in (None, v) for k, v in truth.items()):
            got["wrong"] += 1
        elif f == truth:
            got["full"] += 1
        else:
            got["dropped"] += 1
    assert all(n > 20 for n in got.values()), got


# -- the judge's requests are the reward's -----------------------------------------------------


def test_judge_training_requests_are_what_the_reward_sends():
    from vlrl.core.backends.python import FunctionBackend
    from vlrl.methods.rubicap.reward import RubricJudgeReward

    sent = []

    def oracle_judge(messages, sampling):  # answers like the tiny judge: one word
        text = messages[-1]["content"]
        sent.append(text)
        crit = next(line[len("Criterion: "):] for line in text.splitlines() if line.startswith("Criterion: "))
        cap = json.loads(next(line for line in text.splitlines() if line.startswith('"')))
        return PASS if oracle_verdict(crit, cap) else FAIL

    reward = RubricJudgeReward(judge=FunctionBackend(oracle_judge, "oracle"), per_rubric=True, max_tokens=4,
                               max_retries=0)
    request = request_renderer()
    rng = random.Random(3)
    expected = []
    caps, sets = [], []
    for sc in _scenes(20, 7):
        _, rubrics = scene_rubrics(sc, rng)
        if not rubrics:
            continue
        cap = caption_variant(sc, rng)
        caps.append(cap)
        sets.append(rubrics)
        expected += [request(cap, r) for r in rubrics]
    scores = reward.score(caps, rubrics=sets)
    assert sorted(sent) == sorted(set(expected))
    # and the one-word verdicts are read as verdicts: the reward is the oracle's weighted pass rate
    for cap, rubrics, s in zip(caps, sets, scores, strict=True):
        pos = [r for r in rubrics if r["weight"] > 0]
        gain = sum(r["weight"] for r in pos if oracle_verdict(r["criterion"], cap))
        loss = sum(-r["weight"] for r in rubrics if r["weight"] < 0 and oracle_verdict(r["criterion"], cap))
        assert s.value == pytest.approx(max(-1.0, (gain - loss) / sum(r["weight"] for r in pos)))


def test_reward_block_builds_through_a_recipe(tmp_path):
    from vlrl.demos.shapes.rubicap.runner import RubicapConfig, rubicap_reward_block
    from vlrl.rewards import build_reward

    cfg = RubicapConfig.make(seed=3, quick=True)
    block = rubicap_reward_block(tmp_path / "judge", cfg)
    assert block["name"] == "rubicap_rubric"
    s = block["settings"]
    assert s["per_rubric"] is True and s["temperature"] == 0.0 and s["judge"].startswith(f"hf:{tmp_path / 'judge'}")
    reward = build_reward(block["name"], **s, guards=block["guards"])
    assert "rubrics" in reward.required_columns  # the guarded reward passes its inner reward's columns on


# -- metrics -----------------------------------------------------------------------------------


def _eval(acc: float) -> dict:
    ev = {"ids": ["a"], "captions": {"greedy": ["x"], "sampled": ["y"]}}
    for who in ("reader", "twin_judge", "reward_answerer"):
        for kind in ("greedy", "sampled"):
            ev[f"{who}_{kind}"] = {"acc": acc, "hallucination_rate": 0.1, "cannot_answer_rate": 0.2}
    for kind in ("greedy", "sampled"):
        ev[f"stats_{kind}"] = {"parse_rate": 1.0, "facts_stated": 0.5, "stated_correct": 0.9, "words": 9.0}
        ev[f"rubric_judge_{kind}"] = {"acc": 0.9, "verdicts": 10, "failed": 0, "by_kind": {"criterion": 0.9}}
    return ev


def test_metrics_carry_the_issue_keys(tmp_path):
    from vlrl.demos.shapes.rubicap.runner import RubicapConfig, build_metrics

    (tmp_path / "judge").mkdir()
    (tmp_path / "judge" / "warmstart.json").write_text(json.dumps({"heldout_acc": 0.93}))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "rubicap_train_stats.json").write_text(json.dumps({"rows": 5}))
    history = [{"step": i, "reward": 0.1 * i, "rewards/rubicap_rubric/mean": 0.05 * i} for i in range(1, 11)]
    cur = {"train": {}, "eval": {}, "dropped_rate": 0.1, "by_kind": {}}
    m = build_metrics(RubicapConfig.make(seed=2, quick=True), _eval(0.3), _eval(0.6), history, cur, {},
                      tmp_path / "judge", tmp_path)
    for key in ("method", "acc_before", "acc_after", "reward_first", "reward_last", "wall_seconds", "seed",
                "judge_verdict_acc", "judge_verdict_acc_heldout"):
        assert key in m, key
    assert m["method"] == "rubicap" and m["seed"] == 2 and m["judge_verdict_acc_heldout"] == 0.93
    assert m["reward_first"] == pytest.approx(0.15) and m["reward_last"] == pytest.approx(0.4)  # the rubric reward
    assert not any(k.startswith("reward_answerer_") for k in m)  # no QA answerer is a reward here
    assert m["twin_judge_greedy_acc_after"] == 0.6 and m["judge"] == "reader"
    from vlrl.demos.shapes.rubicap.runner import report_parts

    extra = report_parts(m)["extra_html"]  # the judge-oracle agreement plot, before and after RL
    assert "data:image/png;base64," in extra and "0.900 [" not in extra  # no interval was given here


def test_rubicap_folder_is_not_a_caprl_folder(tmp_path):
    from vlrl.demos.shapes.caprl.runner import DemoConfig
    from vlrl.demos.shapes.kit.base import DemoError, prepare_out
    from vlrl.demos.shapes.rubicap.runner import RubicapConfig

    prepare_out(tmp_path / "x", DemoConfig.make(quick=True), force=False)
    with pytest.raises(DemoError):
        prepare_out(tmp_path / "x", RubicapConfig.make(quick=True), force=False)


# -- slow: the real thing ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_rubicap_demo_quick_learns(tmp_path):
    from tests.support.demo import ENV, FRESH_SEED, VLRL

    out = tmp_path / "demo"
    # a seed other than the one the demo's choices were tuned on (seed 0): a fresh-seed check
    res = subprocess.run([VLRL, "demo", "--method", "rubicap", "--quick", "--seed", str(FRESH_SEED), "--out", str(out)],
                         env=ENV, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    for key in ("method", "acc_before", "acc_after", "reward_first", "reward_last", "wall_seconds", "seed",
                "judge_verdict_acc", "judge_verdict_acc_heldout"):
        assert key in m, key
    assert m["method"] == "rubicap" and m["seed"] == FRESH_SEED
    assert m["acc_after"] >= m["acc_before"] + 0.20, m
    assert m["reward_last"] > m["reward_first"]
    recipe = (out / "recipe.yaml").read_text()
    assert "rubicap_rubric" in recipe and "caprl_qa" not in recipe
    assert Path(out / "report.html").read_text().count("data:image/png;base64,") >= 4
