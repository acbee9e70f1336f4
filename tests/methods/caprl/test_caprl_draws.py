"""caprl_qa draws: fresh per step, deterministic from (seed, step, image), every question asked."""

from __future__ import annotations

from tests.support.scripted import Scripted
from vlrl.core.backends import ChatResult, ChoiceResult
from vlrl.rewards import build_reward

QUESTIONS = [
    {"question": f"Question number {i}?", "options": ["red", "blue", "green", "yellow"], "answer": "ABCD"[i % 4]}
    for i in range(6)
]


def uniform() -> Scripted:
    """An answerer with no opinion: every option equally likely (exact mode only)."""
    return Scripted("uniform", choose=lambda r: ChoiceResult(probs={c: 1 / len(r.choices) for c in r.choices}, method="logits", mass=1.0))


def asked(asks):
    return {a.id.split("/")[0] for a in asks}


def orders(asks):
    return [a.presentation.options for a in asks]


def test_every_curated_question_gets_asked_across_steps():
    r = build_reward("caprl_qa", answerer=uniform(), mode="exact", questions_per_caption=2, rounds=1)
    seen: set[str] = set()
    for step in range(40):
        seen |= asked(r._plan("cap", QUESTIONS, step)[0])
    assert seen == {f"q{i}" for i in range(len(QUESTIONS))}


def test_draws_are_a_function_of_seed_step_and_image():
    r = build_reward("caprl_qa", answerer=uniform(), mode="exact", questions_per_caption=4, rounds=2)
    again = build_reward("caprl_qa", answerer=uniform(), mode="exact", questions_per_caption=4, rounds=2)
    plan = r._plan("cap", QUESTIONS, 3, "img-1")[0]
    assert orders(plan) == orders(again._plan("another caption", QUESTIONS, 3, "img-1")[0])  # a group shares them
    assert [a.id for a in plan] == [a.id for a in again._plan("cap", QUESTIONS, 3, "img-1")[0]]  # a rerun too
    others = [r._plan("cap", QUESTIONS, 4, "img-1")[0], r._plan("cap", QUESTIONS, 3, "img-2")[0]]
    assert all(orders(o) != orders(plan) or [a.id for a in o] != [a.id for a in plan] for o in others)
    # option orders change across steps too (the same question, a new order)
    firsts = {r._plan("cap", QUESTIONS[:1], s)[0][0].presentation.options for s in range(12)}
    assert len(firsts) > 1


def test_the_step_comes_from_the_trainer_state():
    class State:
        def __init__(self, step):
            self.global_step = step

    r = build_reward("caprl_qa", answerer=uniform(), mode="exact", questions_per_caption=2, rounds=1)
    plans = []
    original = r._plan

    def spy(caption, questions, call, image=None, *more):
        plans.append(call)
        return original(caption, questions, call, image, *more)

    r._plan = spy
    r(prompts=["p"], completions=[[{"role": "assistant", "content": "c"}]], questions=[QUESTIONS], trainer_state=State(17))
    r(prompts=["p"], completions=[[{"role": "assistant", "content": "c"}]], questions=[QUESTIONS], trainer_state=State(17))
    assert plans == [17, 17]  # two calls inside one step see the same draws


def test_questions_all_asks_each_question_once_per_round():
    r = build_reward("caprl_qa", answerer=uniform(), mode="exact", questions="all", rounds=3)
    plan = r._plan("cap", QUESTIONS, 0)[0]
    assert len(plan) == len(QUESTIONS) * 3
    assert asked(plan) == {f"q{i}" for i in range(len(QUESTIONS))}
    (s,) = r.score(["cap"], questions=[QUESTIONS])
    assert s.value is not None and s.details["answerer_calls"] == len(QUESTIONS) * 3


def test_fixed_draws_and_the_old_redraw_flag_still_work():
    fixed = build_reward("caprl_qa", answerer=uniform(), mode="exact", draws="fixed")
    old = build_reward("caprl_qa", answerer=uniform(), mode="exact", redraw=False)
    for r in (fixed, old):
        assert orders(r._plan("cap", QUESTIONS, 0)[0]) == orders(r._plan("cap", QUESTIONS, 9)[0])
    assert build_reward("caprl_qa", answerer=uniform(), redraw=True).draws == "per_step"



def says(text: str) -> Scripted:
    """Always replies the same text (sample mode); records the requests."""
    return Scripted("says", lambda r: ChatResult(texts=[text]))

def test_caprl_public_preset_prompt_shape_and_parse_rule():
    q = [{"question": "Which colour?", "options": ["red", "blue", "green"], "answer": "C"}]
    pub = says("Answer: C")
    r = build_reward("caprl_qa", answerer=pub, preset="caprl_public", draws="fixed", shuffle=False)
    assert (r.mode, r.rounds, r.questions_per_caption, r.temperature, r.max_tokens) == ("sample", 1, 8, 0.6, 10)
    (s,) = r.score(["a caption"], questions=[q])
    prompt = pub.requests[0].prompt  # a raw prompt: no chat template, so no system turn
    assert prompt.startswith("<|im_start|>user\n") and prompt.count("<|im_start|>") == 2
    assert prompt.endswith("Question: Which colour?\n   - A) red\n   - B) blue\n   - C) green\n"
                           "   - F) Can not answer based on the caption  <|im_end|>\n<|im_start|>assistant\nThe answer is")
    assert s.value == 0.0  # the public rule reads the "A" of "Answer: C"
    vl = build_reward("caprl_qa", answerer=says("Answer: C"), draws="fixed", shuffle=False, mode="sample")
    assert vl.score(["a caption"], questions=[q])[0].value == 1.0
    # an explicit non-default setting wins over the preset
    assert build_reward("caprl_qa", answerer=pub, preset="caprl_public", rounds=4).rounds == 4
