"""Held-out by layout: no evaluation scene of any shapes demo shares a layout, or pixels, with any
image any demo model trains on; and the rule-based reader that judges them is right about the scenes."""

from __future__ import annotations

import hashlib
import random
from dataclasses import replace

import pytest

from vlrl.core.pipeline import read_jsonl
from vlrl.core.stats import bootstrap_ratio
from vlrl.demos.shapes.caprl.runner import DemoConfig, make_data
from vlrl.demos.shapes.kit import judging as J
from vlrl.demos.shapes.kit import problems as P
from vlrl.demos.shapes.kit import world as W
from vlrl.demos.shapes.tiny_models.answerer import answerer_scenes
from vlrl.demos.shapes.tiny_models.captioner import captioner_scenes
from vlrl.demos.shapes.tiny_models.likert import LikertConfig, likert_scenes
from vlrl.demos.shapes.tiny_models.rubric_judge import JudgeConfig
from vlrl.demos.shapes.tiny_models.settings import WarmStartConfig
from vlrl.demos.shapes.vision_r1.runner import VR1Config, layouts

WORLD = W.WorldConfig()


def _all_layouts(world: W.WorldConfig) -> dict[str, list[tuple]]:
    """Every layout of the default world (one centred shape, or two in the left/right halves)."""
    items = [(s, c, z) for s in W.SHAPES for c in W.COLOURS for z in W.SIZES]
    one = [(("middle", *a, None),) for a in items]
    two = [(("left", *a, None), ("right", *b, None)) for a in items for b in items]
    return {"one": one, "two": two}


def test_layout_split_holds_out_a_fixed_share_of_both_scene_sizes():
    lays = _all_layouts(WORLD)
    assert (len(lays["one"]), len(lays["two"])) == (24, 576)
    for group in lays.values():
        held = [lay for lay in group if W.layout_split(lay, WORLD.heldout_layouts) == "eval"]
        assert 0 < len(held) < len(group) / 2
    assert all(W.layout_split(lay, 0.0) == "train" for lay in lays["two"])  # 0 turns the split off
    for split in W.SPLITS:
        scenes = W.make_scenes(300, 5, WORLD, prefix="x", split=split)
        assert len(scenes) == 300 and all(W.layout_split(W.layout(s), WORLD.heldout_layouts) == split for s in scenes)
        assert {len(s.items) for s in scenes} == {1, 2}
    # without a split, the old draws (backward compatible) and both kinds of layout
    assert [s.to_dict() for s in W.make_scenes(50, 5, WORLD, prefix="x")] == \
        [s.to_dict() for s in W.make_scenes(50, 5, replace(WORLD, heldout_layouts=0.0), prefix="x", split="eval")]
    with pytest.raises(ValueError, match="split"):
        W.make_scenes(1, 0, WORLD, split="test")


def _pixels(scenes: list[W.Scene], world: W.WorldConfig) -> set[str]:
    return {hashlib.sha1(W.render(s, world).tobytes()).hexdigest() for s in scenes}


@pytest.mark.parametrize("seed", [0, 3])
def test_no_evaluation_image_equals_any_training_image_of_any_model(tmp_path, seed):
    """At the demos' real sizes: captioner SFT (and the Likert judge's captioner init of seed + 2000),
    reward and twin answerers, the Likert judge, GRPO scenes and the Vision-R1 cold start and RL set
    against the CapRL/RubiCap/compare evaluation scenes and Vision-R1's held-out problems."""
    warm, cfg = WarmStartConfig(), DemoConfig.make(seed=seed)
    world = warm.world
    training: list[W.Scene] = []
    for s in (seed, seed + cfg.judge_seed_offset, seed + LikertConfig().init_seed_offset):
        training += captioner_scenes(warm, s)
        training += answerer_scenes(warm, warm.ans_pool, s)
    lik = likert_scenes(LikertConfig(), warm, seed)
    training += lik[LikertConfig().heldout:]  # the first ones only measure the judge, from held-out layouts
    assert all(W.layout_split(W.layout(s), world.heldout_layouts) == "eval" for s in lik[:LikertConfig().heldout])
    training += W.make_scenes(cfg.grpo_steps * cfg.images_per_step, seed, world, prefix="train-", split="train")
    vr1 = VR1Config.make(seed=seed)
    training += [sc for sc, _ in P.make_problems(vr1.cold_start_problems, seed, world, "coldstart", layouts("coldstart"))]
    training += [sc for sc, _ in P.make_problems(vr1.prompts_per_step * vr1.total_steps, seed, world, "train",
                                                 layouts("train"))]
    evaluation = W.make_scenes(cfg.eval_scenes, seed, world, prefix="eval-", split="eval")
    evaluation += [sc for sc, _ in P.make_problems(vr1.eval_problems, seed, world, "eval", layouts("eval"))]
    assert not {W.layout(s) for s in evaluation} & {W.layout(s) for s in training}
    assert not _pixels(evaluation, world) & _pixels(training, world)
    # the rubric judge (a text model) is measured on criteria of held-out layouts, trained on the others
    assert JudgeConfig().world == world

    # and the files the CapRL demo actually writes (a small run of its data stage)
    small = replace(cfg, grpo_steps=30, eval_scenes=40)
    make_data(tmp_path, small)
    data = tmp_path / "data"
    train_png = {hashlib.sha1((data / r["image"]).read_bytes()).hexdigest() for r in read_jsonl(data / "train_raw.jsonl")}
    eval_rows = list(read_jsonl(data / "eval_raw.jsonl"))
    assert len(eval_rows) == 40 and not train_png & {hashlib.sha1((data / r["image"]).read_bytes()).hexdigest()
                                                      for r in eval_rows}
    assert not {W.layout(W.Scene.from_dict(r["scene"])) for r in eval_rows} & {W.layout(s) for s in training}


def test_reader_is_right_about_the_scenes_and_calls_false_facts_wrong():
    rng = random.Random(0)
    rows = []
    for sc in W.make_scenes(60, 1, WORLD, prefix="r", split="eval"):
        rows.append({"scene": sc.to_dict(), "caption_full": W.caption(sc),
                     "questions": [q.to_dict() for q in W.scene_questions(sc, rng, WORLD)]})
    check = J.check_reader(rows)
    assert check["full_caption_acc"] == 1.0 and check["empty_caption_cannot"] == 1.0 and check["asks"] > 300
    # a caption with one mis-stated colour: the colour question about that slot (and only such
    # questions) turn wrong; dropped attributes only ever give "cannot answer"
    caps = []
    for r in rows:
        sc = W.Scene.from_dict(r["scene"])
        items = W.stated_items(sc)
        items[0].colour = next(c for c in W.COLOURS if c != items[0].colour)
        caps.append(W.caption_from_items(items))
    res = J.reader_eval(caps, rows)
    assert 0 < res["hallucination_rate"] < 0.5 and res["by_kind"]["colour"][0] < res["by_kind"]["colour"][1]
    assert res["by_kind"]["size"][0] == res["by_kind"]["size"][1]
    dropped = J.reader_eval([W.caption(W.Scene.from_dict(r["scene"]), rng, 0.6) for r in rows], rows)
    assert dropped["hallucination_rate"] == 0 and dropped["cannot_answer_rate"] > 0.2
    assert J.reader_eval(["a large red circle on on the left"] * len(rows), rows)["cannot_answer_rate"] == 1.0
    # intervals over scenes bracket the pooled rate; the paired gain of a result over itself is 0
    ci = J.rate_intervals(res)
    assert ci["acc_ci"][0] <= res["acc"] <= ci["acc_ci"][1] and ci["acc_ci"][0] < ci["acc_ci"][1]
    assert J.gain_interval(res, res) == [0.0, 0.0]
    assert J.gain_interval(dropped, J.reader_eval([r["caption_full"] for r in rows], rows))[0] > 0


def test_wrong_facts_are_marked_against_the_scene():
    sc = W.Scene("x", [W.Item("left", shape="circle", colour="red", size="large"),
                       W.Item("right", shape="square", colour="blue", size="small")])
    pieces = J.fact_marks("a large green circle on the left and a small blue triangle on the right.", sc)
    assert "".join(t for t, _ in pieces) == "a large green circle on the left and a small blue triangle on the right."
    assert [t for t, wrong in pieces if wrong] == ["green", "triangle"]
    assert [t for t, wrong in J.fact_marks("a red circle in the middle.", sc) if wrong] == ["a red circle in the middle"]
    assert J.fact_marks("red circle left", sc) is None


def test_bootstrap_ratio_resamples_clusters():
    assert bootstrap_ratio([], []) is None
    lo, hi = bootstrap_ratio([1, 0, 1, 1], [1, 1, 1, 1], seed=1)
    assert 0 <= lo <= 0.75 <= hi <= 1
    # a cluster with many questions weighs more than a small one
    lo, hi = bootstrap_ratio([9, 0], [10, 1], seed=0, resamples=500)
    assert hi == 0.9 and lo == 0.0


def _fake_eval(rows, captions):
    from vlrl.demos.shapes.caprl.runner import caption_stats

    ev = {"ids": [r["id"] for r in rows], "captions": {"greedy": captions, "sampled": captions},
          "reader_check": J.check_reader(rows)}
    for who in ("reader", "twin_judge", "reward_answerer"):
        for kind in ("greedy", "sampled"):
            res = J.reader_eval(captions, rows)  # the learned judges' records have the same shape
            ev[f"{who}_{kind}"] = {**res, **J.rate_intervals(res)}
    for kind in ("greedy", "sampled"):
        ev[f"stats_{kind}"] = caption_stats(captions, rows)
    return ev


def test_caprl_metrics_and_report_carry_intervals_kinds_baseline_and_marked_facts(tmp_path):
    from vlrl.demos.shapes.caprl.runner import build_metrics
    from vlrl.demos.shapes.kit.report import write_report

    cfg = DemoConfig.make(seed=3, quick=True)
    (tmp_path / "data" / "images").mkdir(parents=True)
    rng, rows = random.Random(0), []
    for sc in W.make_scenes(12, 3, WORLD, prefix="eval-", split="eval"):
        W.render(sc, WORLD).save(tmp_path / "data" / "images" / f"{sc.id}.png")
        rows.append({"id": sc.id, "image": f"images/{sc.id}.png", "scene": sc.to_dict(), "caption_full": W.caption(sc),
                     "questions": [q.to_dict() for q in W.scene_questions(sc, rng, WORLD)]})
    (tmp_path / "data" / "eval.jsonl").write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    terse = [W.caption(W.Scene.from_dict(r["scene"]), rng, 0.65) for r in rows]
    wrong = []
    for r in rows:
        items = W.stated_items(W.Scene.from_dict(r["scene"]))
        items[0].shape = next(s for s in W.SHAPES if s != items[0].shape)
        wrong.append(W.caption_from_items(items))
    before, after, full = _fake_eval(rows, terse), _fake_eval(rows, wrong), _fake_eval(rows, [r["caption_full"] for r in rows])
    history = [{"step": i, "reward": 0.1 * i, "rewards/caprl_qa/mean": 0.1 * i} for i in range(1, 11)]
    cur = {"train": {}, "eval": {}, "dropped_rate": 0.0, "by_kind": {}}
    m = build_metrics(cfg, before, after, history, cur, {"warm_start": 100.0, "grpo": 20.0, "eval_after": 5.0},
                      full_sft=full)
    assert m["acc_full_sft"] == 1.0 and m["acc_after"] < 1.0 and m["gain_over_full_sft_ci"][1] < 0
    assert m["acc_before_ci"][0] <= m["acc_before"] <= m["acc_before_ci"][1]
    assert m["acc_by_kind_after"]["shape"] < 1.0 == m["acc_by_kind_after"]["colour"]
    assert (m["warm_start_seconds"], m["run_seconds"], m["wall_seconds"]) == (100.0, 25.0, 125.0)
    assert m["twin_judge_greedy_acc_after_ci"] and m["captions_greedy_false_fact_rate_after"] > 0
    page = write_report(tmp_path, cfg, m, before, after, history, full_sft=full).read_text()
    assert "<mark>" in page and "full-caption SFT" in page and "twin judge" in page and "[" in page
