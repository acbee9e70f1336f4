"""vlrl rewards through verl's compute_score contract (verl itself is not installed)."""

from __future__ import annotations

import asyncio
import inspect
import math

import pytest

from vlrl.training import verl as va


def test_signature_matches_verl_custom_reward_function():
    for fn in (va.compute_score, va.compute_score_async, va.hfrrf, va.caprl_qa, va.rubicap_rubric):
        params = list(inspect.signature(fn).parameters.values())
        assert [p.name for p in params[:4]] == ["data_source", "solution_str", "ground_truth", "extra_info"]
        assert params[3].default is None and params[-1].kind is inspect.Parameter.VAR_KEYWORD
    assert inspect.iscoroutinefunction(va.compute_score_async)
    assert not hasattr(va, "compute_score_batch")  # verl 0.9 has no list-calling reward manager


def test_hfrrf_by_default_returns_score_and_details():
    good = va.compute_score("mathvista", "<think>6*7</think><answer>42</answer>", "42", {})
    assert good["score"] == 1.0 and good["applicable"] == 1.0 and good["format_ok"] == 1.0 and good["answer_ok"] == 1.0
    assert all(isinstance(v, float) for v in good.values())  # verl stacks these into tensors
    bad = va.compute_score("mathvista", "42", "42", None)
    assert bad["score"] == 0.0 and bad["format_ok"] == 0.0
    # extra_info columns reach the reward as TRL dataset columns would (choices here)
    mc = va.compute_score("mc", "<think>x</think><answer>Jupiter</answer>", "B", {"choices": ["Mars", "Jupiter"]})
    assert mc["score"] == 1.0
    # not applicable (no gold) is 0.0 for verl, flagged as such
    na = va.compute_score("mathvista", "<think>x</think><answer>1</answer>", "", {})
    assert na["score"] == 0.0 and na["applicable"] == 0.0 and math.isnan(na["format_ok"])
    assert set(na) == set(good)  # one key set per reward: verl stacks the dicts per key


def test_reward_and_settings_from_reward_kwargs_extra_info_or_env(monkeypatch):
    soft = va.compute_score("m", "<think>x</think><answer>41</answer>", "42", None, reward="hfrrf", settings={"soft": True})
    assert soft["score"] == pytest.approx(0.2)
    hard = va.hfrrf("m", "<think>x</think><answer>41</answer>", "42", None)
    assert hard["score"] == 0.0
    monkeypatch.setenv("VLRL_VERL_REWARD", "hfrrf")
    monkeypatch.setenv("VLRL_VERL_REWARD_SETTINGS", '{"soft": true}')
    assert va.compute_score("m", "<think>x</think><answer>41</answer>", "42")["score"] == pytest.approx(0.2)
    # nothing escapes compute_score: an unknown reward is a failed sample, in the same key set
    failed = va.compute_score("m", "x", "1", {"vlrl_reward": "nope"})
    assert failed["reward_failed"] == 1.0 and failed["score"] == 0.0 and failed["applicable"] == 0.0
    assert tuple(failed) == va.detail_keys()


def test_async_form_agrees_and_keys_are_fixed_per_reward():
    sols = ["<think>a</think><answer>4</answer>", "<think>a</think><answer>5</answer>", "4", "<think>a</think><answer>4"]
    one = [va.compute_score("d", s, "4", {}) for s in sols] + [va.compute_score("d", sols[0], "", {})]
    assert [m["score"] for m in one] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert {tuple(m) for m in one} == {va.detail_keys()}  # same keys, same order
    out = asyncio.run(va.compute_score_async("d", sols[0], "4", {}))
    assert _same(out, one[0])


def _same(a, b):
    """Dict equality where NaN equals NaN (a sample's missing values)."""
    return a.keys() == b.keys() and all(a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)


def test_omegaconf_settings_take_effect():
    omegaconf = pytest.importorskip("omegaconf")
    text = "<think>x</think><answer>41</answer>"
    soft = omegaconf.OmegaConf.create({"reward": "hfrrf", "settings": {"soft": True}})
    assert va.compute_score("m", text, "42", None, **soft)["score"] == pytest.approx(0.2)  # soft took effect
    veto = omegaconf.OmegaConf.create({"reward": "hfrrf", "settings": {"soft": True, "guards": {"policy": "veto"}}})
    out = va.compute_score("m", text, "42", None, **veto)
    assert out["guard/any"] == 1.0 and out["score"] == 0.0  # the nested guards block was applied: vetoed


def test_every_guard_detail_reaches_verl():
    """A list hit the learned guard set aside is logged as ``guard/doubted`` (a key outside the fixed
    schema would be dropped without a word)."""
    from vlrl.rewards.guards import GuardSet

    guards = GuardSet.from_settings()
    menu = ("A diner's menu board lists its sides. (fries, onion rings, side salad, nuggets, coleslaw) "
            "Prices are chalked beside each.")
    details = guards.details(guards.evaluate(menu))
    assert details["guard/doubted"] == 1.0 and set(details) <= set(va.detail_keys())
    # every key that is no guard is a summary the reports and verl know as one
    from vlrl.rewards.guards import GUARDS, SUMMARY_KEYS

    assert {k for k in details if k.count("/") == 1 and k.split("/")[1] not in GUARDS} == set(SUMMARY_KEYS)
    out = va.compute_score("x", menu, "", {}, reward="caption_length", settings={"guards": {"policy": "veto"}})
    assert out["guard/doubted"] == 1.0


def test_caption_reward_reads_questions_from_extra_info():
    """caprl_qa through verl: MCQs arrive in extra_info; the answerer is a scripted backend."""
    from tests.support.scripted import Scripted
    from vlrl.core.backends.base import ChatResult

    def always_a(name):
        return Scripted(name, lambda r: ChatResult(texts=["A"] * r.sampling.n, finish_reasons=["stop"] * r.sampling.n))

    questions = [{"question": "What color?", "options": ["red", "blue"], "answer": "A"}]
    res = va.compute_score("caps", "A red ball on grass.", None, {"questions": questions}, reward="caprl_qa",
                           settings={"answerer": always_a("a"), "questions_per_caption": 2, "rounds": 1, "shuffle": False})
    assert res["applicable"] == 1.0 and 0.0 <= res["score"] <= 1.0
    assert "qa_acc" in res and not math.isnan(res["qa_acc"])
    missing = va.compute_score("caps", "A red ball.", None, {}, reward="caprl_qa", settings={"answerer": always_a("a")})
    assert missing["applicable"] == 0.0 and missing["score"] == 0.0


def test_per_sample_dicts_share_one_key_set_like_verl_needs():
    # Regression: a not-applicable or failed sample returned fewer keys than a scored one, so verl's
    # `reward_extra_info[key].append(value)` built ragged columns and the step failed.
    from collections import defaultdict

    rows = [("<think>a</think><answer>4</answer>", "4"), ("<think>a</think><answer>4</answer>", None),
            ("no format", "4"), ("<think>a</think><answer>5</answer>", "")]
    extra = defaultdict(list)
    for sol, gold in rows * 2:
        for k, v in va.compute_score("d", sol, gold, {}, reward="hfrrf", settings={"soft": True}).items():
            extra[k].append(v)
    assert {len(v) for v in extra.values()} == {len(rows) * 2}
    assert extra["applicable"][-4:] == [1.0, 0.0, 1.0, 0.0]


# ---- #30: verl groups, mixed rewards, nothing escapes ----


def _uniform():
    from tests.support.scripted import Scripted
    from vlrl.core.backends import ChoiceResult

    return Scripted("u", choose=lambda r: ChoiceResult(probs={c: 1 / len(r.choices) for c in r.choices}, method="logits",
                                                      mass=1.0))


QUESTIONS = [{"question": f"Question {i}?", "options": ["red", "blue", "green", "yellow"], "answer": "ABCD"[i % 4]}
             for i in range(8)]


def test_captions_of_one_prompt_share_their_draws_under_verl():
    """verl calls compute_score once per sample; the captions of one prompt (one uid / index) must be
    asked the same questions in the same orders, as TRL's group is (#30 finding 6)."""
    answerer = _uniform()
    settings = {"answerer": answerer, "mode": "exact", "questions_per_caption": 2, "rounds": 1}

    seen = []

    def choose(r, _orig=answerer.choose):
        seen.append(r.messages[-1]["content"] if r.messages else "")
        return _orig(r)

    answerer.choose = choose

    def draws(caption, info):
        del seen[:]
        va.compute_score("caps", caption, None, {"questions": QUESTIONS, **info}, reward="caprl_qa", settings=settings)
        return sorted(q for s in seen for q in [s[s.find("Question "):s.find("?") + 1]])

    group = [draws(c, {"index": 7}) for c in ("A red bus.", "A blue bus by a stop.", "Two buses.", "A bus.")]
    assert all(g == group[0] for g in group) and group[0]  # one prompt: common draws
    assert draws("A red bus.", {"uid": "u-1"}) == draws("Another caption.", {"uid": "u-1"})
    others = [draws("A red bus.", {"index": i}) for i in range(8)]
    assert len({tuple(o) for o in others}) > 1  # another prompt, other draws: the check can fail


def test_mixed_rewards_stack_with_one_key_set_and_their_own_settings():
    """Samples of one verl batch pick different rewards; verl stacks by the first sample's keys, so every
    dict has the same keys, and each reward is built from its own settings (#30 finding 7)."""
    from collections import defaultdict

    kw = {"reward_settings": {"hfrrf": {"soft": True},
                              "caprl_qa": {"answerer": _uniform(), "mode": "exact", "questions_per_caption": 1,
                                           "rounds": 1}}}
    rows = [("<think>a</think><answer>41</answer>", "42", {"vlrl_reward": "hfrrf"}),
            ("A red bus.", None, {"vlrl_reward": "caprl_qa", "questions": QUESTIONS}),
            ("A red bus.", None, {"vlrl_reward": "rubicap_rubric"}),  # needs a judge it was not given
            ("x", "1", {"vlrl_reward": "no_such_reward"})]
    out = [va.compute_score("d", sol, gold, info, **kw) for sol, gold, info in rows]
    assert {tuple(o) for o in out} == {va.detail_keys()}
    extra = defaultdict(list)
    for o in out:  # what verl's reward loop does with the first sample's keys
        for k in out[0]:
            extra[k].append(o[k])
    assert out[0]["score"] == pytest.approx(0.2)  # hfrrf got soft=True, not caprl_qa's answerer
    assert out[1]["applicable"] == 1.0 and not math.isnan(out[1]["qa_acc"]) and math.isnan(out[0]["qa_acc"])
    assert [o["reward_failed"] for o in out] == [0.0, 0.0, 1.0, 1.0]  # failures are samples, not exceptions


def test_video_samples_carry_video_path_in_extra_info(tmp_path):
    """CapRL++'s reward reads the video from extra_info.video_path: caprl_qa tells its answerer it reads
    a video's description, and video_judge watches the file; both keep the one key schema."""
    import json as _json

    from tests.support.scripted import Scripted
    from tests.support.videos import make_motion_video, motion_of
    from vlrl.core.backends.base import ChoiceResult

    clip = str(make_motion_video(tmp_path / "r.mp4", "right"))
    asked = []

    def read(r):
        asked.append(r.messages[-1]["content"])
        return ChoiceResult(probs={c: float(c.strip() == "B") for c in r.choices}, method="logits", mass=1.0)

    questions = [{"question": "Which way does it move?", "options": ["left", "right"], "answer": "B"}]
    res = va.compute_score("video_caption_rl", "A red square moves right.", None, {"questions": questions, "video_path": clip},
                           reward="caprl_qa", settings={"answerer": Scripted("a", choose=read), "mode": "exact", "rounds": 1,
                                                        "questions": "all"})
    assert res["score"] == 1.0 and asked and all("a description of a video" in a for a in asked)

    def judge(r):
        video = next(p["video"] for p in r.messages[-1]["content"] if p.get("type") == "video")
        good = motion_of(video) == "right"
        return _json.dumps({"factuality": 10 if good else 0, "temporal_alignment": 10, "coverage": 10, "hallucination": 10})

    out = va.video_judge("video_caption_rl", "A red square moves right.", None, {"video_path": clip, "index": 3},
                         settings={"judge": Scripted("j", judge)})
    assert out["score"] == 1.0 and out["factuality"] == 10.0 and set(out) == set(va.detail_keys())
    bad = va.video_judge("video_caption_rl", "x", None, {"video_path": str(tmp_path / "missing.mp4")}, settings={"judge": Scripted("j", judge)})
    assert bad["applicable"] == 0.0 and bad["video_failures"] == 1.0


def test_a_failed_remote_request_within_the_budget_is_marked_reward_failed(monkeypatch):
    """verl's score tensor cannot hold None, so a request to the reward service that failed (within
    its failure_budget) scores 0.0: it must say reward_failed, or it reads as a measured 0.0."""
    from tests.support.servers import free_port
    from vlrl.rewards.remote import RemoteRewardFailed

    monkeypatch.setattr("vlrl.rewards.remote.pause", lambda s: None)
    settings = {"url": f"http://127.0.0.1:{free_port()}", "retries": 0, "failure_budget": 1}  # nothing listens
    out = va.compute_score("d", "A caption.", None, {"index": 0}, reward="remote", settings=settings)
    assert out["score"] == 0.0 and out["applicable"] == 0.0 and out["reward_failed"] == 1.0
    with pytest.raises(RemoteRewardFailed):  # past the budget: the step fails
        va.compute_score("d", "A caption.", None, {"index": 0}, reward="remote", settings=settings)


def test_malformed_extra_info_and_non_numeric_user_values_are_failed_samples_not_exceptions(tmp_path, monkeypatch):
    """Nothing escapes compute_score (#30 audit): an extra_info that is not a mapping, and a user reward
    returning a string, a list or infinity, fail their sample; a NaN is TRL's "not applicable"."""
    (tmp_path / "a30_user_rewards.py").write_text(
        "def stringy(completions, **kw):\n    return ['high' for _ in completions]\n"
        "def listy(completions, **kw):\n    return [[1.0] for _ in completions]\n"
        "def infy(completions, **kw):\n    return [float('inf') for _ in completions]\n"
        "def nanny(completions, **kw):\n    return [float('nan') for _ in completions]\n"
        "def fine(completions, **kw):\n    return [0.5 for _ in completions]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sol = "<think>a</think><answer>42</answer>"
    for info in ("not a dict", ["a"], 5):
        out = va.compute_score("d", sol, "42", info)
        assert tuple(out) == va.detail_keys() and out["reward_failed"] == 1.0 and out["applicable"] == 0.0
    assert va.compute_score("d", sol, "42", {"index": 3})["score"] == 1.0  # a well-formed row still scores
    for fn in ("stringy", "listy", "infy"):
        out = va.compute_score("d", "x", "1", {}, reward=f"a30_user_rewards:{fn}")
        assert tuple(out) == va.detail_keys() and out["reward_failed"] == 1.0 and out["score"] == 0.0, fn
    nan = va.compute_score("d", "x", "1", {}, reward="a30_user_rewards:nanny")
    assert (nan["score"], nan["applicable"], nan["reward_failed"]) == (0.0, 0.0, 0.0)
    assert va.compute_score("d", "x", "1", {}, reward="a30_user_rewards:fine")["score"] == 0.5


def test_a_missing_ground_truth_is_not_applicable_never_a_measured_zero():
    """verl rows with no ground truth (None, blank, or NaN as a parquet null reads) say nothing about the
    completion: hfrrf gives None, not 0.0 (#30 audit)."""
    sol = "<think>a</think><answer>42</answer>"
    for gt in (None, "", " ", float("nan")):
        out = va.compute_score("d", sol, gt, {"index": 0})
        assert (out["score"], out["applicable"], out["reward_failed"]) == (0.0, 0.0, 0.0), gt
    assert va.compute_score("d", sol, "42", {"index": 0})["applicable"] == 1.0
