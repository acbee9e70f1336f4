"""caprl_qa reward: a scripted answerer at the backend seam, plus the real tiny in-process model."""

from __future__ import annotations

import re

import pytest

from vlrl.core.backends import Backend, ChatResult, ChoiceResult
from vlrl.methods.caprl.mcq import LETTERS
from vlrl.rewards import build_reward

QUESTIONS = [
    {"question": "What colour is the circle?", "options": ["red", "blue", "green", "yellow"], "answer": "A"},
    {"question": "What shape is on the left?", "options": ["square", "star", "triangle"], "answer": "C"},
]


class FactAnswerer(Backend):
    """Answers correctly only when the caption states the gold option's text; else abstains.

    Deterministic, so ``chat`` and ``score_choices`` (one-hot) must give identical rewards.
    """

    kind = "scripted"

    def __init__(self, fail: bool = False):
        super().__init__("fact-answerer")
        self.fail = fail
        self.chat_batches: list[int] = []
        self.choice_batches: list[int] = []

    def _pick(self, messages) -> tuple[str, list[str]]:
        text = messages[0]["content"]
        caption = re.search(r"<description>\n(.*?)\n</description>", text, re.S).group(1).lower()
        opts = re.findall(r"^([A-Z])\. (.*)$", text, re.M)
        letters = [L for L, _ in opts]
        for L, o in opts:
            if re.search(rf"\b{re.escape(o.lower())}\b", caption):
                return L, letters
        return next(L for L, o in opts if o.lower().startswith("cannot answer")), letters

    def _chat(self, requests):
        if self.fail:
            raise ConnectionError("answerer endpoint down")
        self.chat_batches.append(len(requests))
        assert requests[0].messages[-1] == {"role": "assistant", "content": "The answer is"}
        return [ChatResult(texts=[f" {self._pick(r.messages)[0]}."]) for r in requests]

    def _score_choices(self, requests):
        if self.fail:
            raise ConnectionError("answerer endpoint down")
        self.choice_batches.append(len(requests))
        out = []
        for r in requests:
            letter, letters = self._pick(r.messages)
            assert r.choices == [f" {L}" for L in letters] and r.prefix == "The answer is"
            out.append(ChoiceResult(probs={f" {L}": float(letter == L) for L in letters}, method="logits", mass=1.0))
        return out


def reward(backend, **kw):
    return build_reward("caprl_qa", answerer=backend, **kw)


def test_informative_caption_beats_generic_and_empty():
    r = reward(FactAnswerer())
    caps = ["A red circle next to a triangle.", "An image.", "", "A red circle."]
    scores = r.score(caps, questions=[QUESTIONS] * 4)
    vals = [s.value for s in scores]
    assert vals[0] == pytest.approx(1.0)
    assert vals[1] == vals[2] == 0.0
    assert 0.0 < vals[3] < 1.0
    assert scores[1].details["cannot_answer_rate"] == 1.0
    assert scores[0].details["cannot_answer_rate"] == 0.0
    assert scores[0].details["n_questions"] == 2


def test_exact_and_sample_agree_on_a_deterministic_answerer():
    caps = ["A red circle.", "A triangle and a star.", "nothing useful", "red circle, triangle"]
    s = reward(FactAnswerer(), mode="sample", seed=3).score(caps, questions=[QUESTIONS] * 4)
    e = reward(FactAnswerer(), mode="exact", seed=3).score(caps, questions=[QUESTIONS] * 4)
    assert [x.value for x in s] == pytest.approx([x.value for x in e])
    assert [x.details["cannot_answer_rate"] for x in s] == pytest.approx([x.details["cannot_answer_rate"] for x in e])


def test_one_backend_call_and_identical_requests_sent_once():
    b = FactAnswerer()
    q = [{"question": "Colour?", "options": ["red", "blue"], "answer": "A"}]
    r = reward(b, mode="exact", questions_per_caption=8, rounds=4)
    scores = r.score(["a red thing", "a red thing", "a blue thing"], questions=[q, q, q])
    assert len(b.choice_batches) == 1  # the whole batch in one call
    # 2 options -> only 2 orders exist; duplicates of a caption cost nothing.
    assert b.choice_batches[0] <= 4
    assert scores[1].details["answerer_calls"] == 0
    assert sum(s.details["answerer_calls"] for s in scores) == b.choice_batches[0]
    assert [s.value for s in scores] == [1.0, 1.0, 0.0]

    b2 = FactAnswerer()
    reward(b2, mode="sample").score(["x", "x"], questions=[q, q])
    assert b2.chat_batches == [32]  # 8 questions x 4 rounds, the duplicate caption free


def test_bad_questions_give_none_and_are_counted():
    r = reward(FactAnswerer())
    bad = {"question": "Colour?", "options": ["red", "blue"], "answer": "E"}
    dup = {"question": "Colour?", "options": ["red", "Red"], "answer": "A"}
    scores = r.score(["red", "red", "red", "red"], questions=[[bad], [bad, QUESTIONS[0]], None, "not json"])
    assert scores[0].value is None and "answer letter E" in scores[0].details["reason"]
    assert scores[1].value == 1.0 and scores[1].details["invalid_questions"] == 1
    assert scores[2].value is None and scores[3].value is None
    assert r.score(["red"], questions=[[dup]])[0].value is None


def test_answerer_failure_gives_none_not_a_crash():
    r = reward(FactAnswerer(fail=True))
    scores = r.score(["a red circle"], questions=[QUESTIONS])
    assert scores[0].value is None and "answerer" in scores[0].details["reason"]
    r2 = build_reward("caprl_qa", answerer="hf:/does/not/exist")
    assert r2.score(["a red circle"], questions=[QUESTIONS])[0].value is None


def test_option_shapes_and_trl_contract():
    labelled = {"question": "Colour?", "options": ["A. blue", "B. red"], "answer": "B"}
    by_text = {"question": "Colour?", "options": {"A": "blue", "B": "red"}, "answer": "red"}
    logged = {}
    r = reward(FactAnswerer())
    out = r(
        prompts=[[{"role": "user", "content": "describe"}]] * 2,
        completions=[[{"role": "assistant", "content": "a red box"}]] * 2,
        completion_ids=None,
        questions=[[labelled], [by_text]],
        image=[None, None],
        log_metric=lambda k, v: logged.setdefault(k, v),
    )
    assert out == [1.0, 1.0]
    assert logged["caprl_qa/qa_acc"] == 1.0 and "caprl_qa/cannot_answer_rate" in logged


def test_draws_are_seeded_and_shared_within_a_group():
    b = FactAnswerer()
    r = reward(b, questions_per_caption=3, rounds=2, draws="fixed")
    a1, _ = r._plan("cap", QUESTIONS, 0)
    a2, _ = r._plan("cap", QUESTIONS, 5)  # fixed draws: the call index does not matter
    assert [x.messages for x in a1] == [x.messages for x in a2]
    r2 = reward(b, questions_per_caption=3, rounds=2, seed=1, redraw=True)
    plans = {tuple(str(x.messages) for x in r2._plan("cap", QUESTIONS, c)[0]) for c in range(4)}
    assert len(plans) > 1
    # the abstain option is always present and always last
    for x in a1:
        assert x.presentation.options[-1].startswith("Cannot answer") and x.presentation.abstain == LETTERS[len(x.presentation.options) - 1]


@pytest.mark.slow
def test_real_tiny_answerer_both_modes(tiny_lm, tmp_path):
    caps = ["A red circle next to a triangle.", "An image."]
    qs = [QUESTIONS, QUESTIONS]
    ex = build_reward("caprl_qa", answerer=f"hf:{tiny_lm}?device=cpu", mode="exact", questions_per_caption=2, rounds=2,
                      min_letter_mass=0.0)
    s1 = ex.score(caps, questions=qs)
    rerun = build_reward("caprl_qa", answerer=ex.backend, mode="exact", questions_per_caption=2, rounds=2,
                         min_letter_mass=0.0)
    s2 = rerun.score(caps, questions=qs)
    assert all(s.value is not None and 0.0 <= s.value <= 1.0 for s in s1)
    assert [s.value for s in s1] == [s.value for s in s2]
    sa = build_reward("caprl_qa", answerer=f"hf:{tiny_lm}?device=cpu", mode="sample", questions_per_caption=2,
                      rounds=2, cache=str(tmp_path / "cache"))
    out = sa.score(caps, questions=qs)
    assert all(s.value is not None and 0.0 <= s.value <= 1.0 for s in out)
    assert all(s.details["answerer_calls"] == 4 for s in out)


@pytest.mark.slow
def test_bench_reward_cli(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "bench.json"
    r = subprocess.run([str(Path(sys.executable).parent / "vlrl"), "bench", "reward", "--json", str(out), "--captions", "3",
                        "--repeats", "2", "--questions-per-caption", "2", "--rounds", "2", "--grpo-steps", "0"],
                       capture_output=True, text=True, timeout=600, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert set(res["by_rounds"]) == {"rounds_1", "rounds_2"}  # the shipped recipe's N=1 beside --rounds
    for block in res["by_rounds"].values():
        for mode in ("sample", "exact"):
            assert block[mode]["reward_std_across_repeats"] >= 0.0  # both modes reseeded: no zero by construction
        assert block["throughput_ratio"] == pytest.approx(block["exact"]["captions_per_s"] / block["sample"]["captions_per_s"])
    assert res["throughput_ratio"] == res["by_rounds"]["rounds_2"]["throughput_ratio"]
    assert any(line.startswith("rounds_1 throughput ratio") for line in r.stdout.splitlines())


@pytest.mark.slow
def test_grpo_reward_share_times_the_reward_inside_a_real_tiny_grpo_run():
    """The training layer measures it (methods sit below training); both modes run the tiny recipe."""
    from vlrl.bench.grpo_share import grpo_reward_share

    res = grpo_reward_share(1)
    assert res["steps"] == 1
    for mode in ("exact", "sample"):
        r = res[mode]
        assert 0 < r["reward_seconds"] <= r["train_seconds"]  # the reward was called inside train()
        assert r["reward_share"] == pytest.approx(r["reward_seconds"] / r["train_seconds"], abs=0.01)


def test_group_by_prefix_keeps_captions_together():
    from vlrl.core.backends.prefix_share import group_by_prefix

    instr = list(range(40))
    cap_a, cap_b = [100] * 60, [200] * 60
    seqs = [instr + cap_a + [1, 2], instr + cap_b + [1], instr + cap_a + [3], instr + cap_b + [4, 5], [7, 7]]
    groups = {tuple(sorted(idx)): shared for shared, idx in group_by_prefix(seqs, min_shared=32)}
    assert groups == {(0, 2): 100, (1, 3): 100, (4,): 0}
    # every member keeps at least one token of its own
    assert group_by_prefix([[1] * 40, [1] * 40 + [2]], min_shared=8) == [(39, [0, 1])]


@pytest.mark.slow
def test_shared_prefix_scoring_matches_plain_forward(tiny_lm):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vlrl.core.backends.prefix_share import shared_prefix_probs

    net = AutoModelForCausalLM.from_pretrained(str(tiny_lm)).eval()
    tok = AutoTokenizer.from_pretrained(str(tiny_lm))
    cap = "A large red circle on the left and a small blue square on the right. " * 3
    texts = [cap + q for q in ("Colour? A red B blue", "Shape? A star", "Size?")] + ["unrelated short text"]
    done, rest = shared_prefix_probs(net, tok, texts, "cpu")
    assert sorted(done) == [0, 1, 2] and rest == [3]
    for i, probs in done.items():
        with torch.inference_mode():
            ids = tok(texts[i], add_special_tokens=False, return_tensors="pt")["input_ids"]
            ref = torch.softmax(net(input_ids=ids).logits[0, -1].float(), -1)
        assert torch.allclose(probs, ref, atol=1e-5)


def test_accepts_vlrl_records_mcq():
    from vlrl.core.records import MCQ as RecordMCQ

    rec = RecordMCQ(question="Colour?", options=["blue", "red", "green"], answer="B")
    scores = reward(FactAnswerer()).score(["a red box", "nothing"], questions=[[rec], [rec]])
    assert [s.value for s in scores] == [1.0, 0.0]


class SampledFallbackAnswerer(FactAnswerer):
    """A backend without logprobs (transformers serve): score_choices estimates from sampled texts."""

    def __init__(self, junk: bool = False):
        super().__init__()
        self.junk = junk

    def _score_choices(self, requests):
        from vlrl.core.backends.base import choices_from_samples

        out = []
        for r in requests:
            letter, _ = self._pick(r.messages)
            texts = ["I think so"] * 4 if self.junk else [letter, f" {letter}.", f"({letter})", letter]
            probs, mass = choices_from_samples(texts, r.choices)
            out.append(ChoiceResult(probs=probs, method="sampled", mass=mass))
        return out


def test_exact_mode_on_a_sampling_fallback_reads_the_sampled_letters():
    caps = ["A red circle next to a triangle.", "An image."]
    good = reward(SampledFallbackAnswerer(), mode="exact").score(caps, questions=[QUESTIONS] * 2)
    assert [s.value for s in good] == pytest.approx([1.0, 0.0])
    assert good[1].details["cannot_answer_rate"] == pytest.approx(1.0)
    junk = reward(SampledFallbackAnswerer(junk=True), mode="exact").score(caps, questions=[QUESTIONS] * 2)
    # no sample named an option: parse failures scoring 0, not a uniform guess
    assert [s.value for s in junk] == [0.0, 0.0]
    assert junk[0].details["parse_failures"] > 0


def test_bench_reward_with_a_dead_answerer_is_a_clear_error_not_numbers():
    from vlrl.bench.reward import bench_reward

    with pytest.raises(ValueError, match="no caption could be scored in sample mode .*answerer"):
        bench_reward(FactAnswerer(fail=True), n_captions=2, repeats=1, questions_per_caption=1, rounds=1)


class FlakyAnswerer(FactAnswerer):
    """Fails every third chat request (an HTTP error on that ask only)."""

    def _chat(self, requests):
        good = super()._chat(requests)
        return [ChatResult(error="HTTP 502 from the answerer") if k % 3 == 1 else g for k, g in enumerate(good)]


def test_a_caption_with_failed_asks_scores_none_unless_subset_is_asked_for():
    caps = ["A red circle next to a triangle.", "An image."]
    strict = reward(FlakyAnswerer(), mode="sample").score(caps, questions=[QUESTIONS] * 2)
    for s in strict:  # never a mean over a smaller question set than the group's other captions get
        assert s.value is None and s.details["backend_failed"] and "asks failed" in s.details["reason"]
        assert 0.0 < s.details["ask_failure_rate"] < 1.0
    subset = reward(FlakyAnswerer(), mode="sample", on_ask_failure="subset").score(caps, questions=[QUESTIONS] * 2)
    assert subset[0].value == pytest.approx(1.0) and subset[1].value == 0.0
    assert subset[0].details["ask_failure_rate"] == strict[0].details["ask_failure_rate"]
    healthy = reward(FactAnswerer(), mode="sample").score(caps, questions=[QUESTIONS] * 2)
    assert [s.details["ask_failure_rate"] for s in healthy] == [0.0, 0.0]
    with pytest.raises(ValueError, match="on_ask_failure"):
        reward(FactAnswerer(), on_ask_failure="drop")
