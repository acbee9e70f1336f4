"""``preset: caprl_public`` is the public CapRL reward, held against an independent re-implementation.

The reference below is written from the published reward server (CapRL's OpenRLHF ``serve_rm.py``,
image branch, as CapRL++'s verl port keeps it) and shares no code with vlrl: it builds each
question block from a ``reward_model.ground_truth`` entry the way the public client does, draws 8
questions with replacement, reshuffles the options on every draw (dropping a stored abstain line
and appending "F) Can not answer based on the caption"), formats its raw prompt string, and
scores the first capital A-I of each reply. Both sides get the same ``random.Random`` stream for a
caption, so the draws are the same draws, and the test compares the prompt strings byte for byte,
their token ids under the real Qwen tokenizer as the in-process backend encodes them, and the
rewards.
"""

from __future__ import annotations

import random
import re

import pytest

from vlrl.core.backends import Backend, ChatResult, load_backend
from vlrl.rewards import build_reward

# -- the reference: the public reward, re-implemented from its published source -----------------------

PUBLIC_PROMPT = (
    "<|im_start|>user\nYou will be given an image caption describing the visual content.  \n"
    "Your task is to answer the multiple-choice question **strictly based on the caption**, even if the answer "
    "may seem obvious from prior knowledge or question wording.\n\n"
    "Ignore any external knowledge. Do not make assumptions beyond what the caption explicitly or implicitly "
    "states.\n\n"
    "Example 1:\nCaption: <Caption Start> A woman in a red coat is walking a black dog across a snowy park. "
    "<Caption End>  \nQuestion: What color is the dog?\n- A) Brown  \n- B) White  \n- C) Black  \n- D) Gray\n"
    "- E) Can not answer based on the caption\n\nThe answer is C.\n\n"
    "Example 2:\nCaption: <Caption Start> A child is waving a British flag during a parade. <Caption End>  \n"
    "Question: What color is the flag?\n- A) Red  \n- B) Blue  \n- C) Red, white, and blue  \n- D) White\n"
    "- E) Can not answer based on the caption\n\nThe answer is E.\n\n"
    "Now, answer the question based on the following caption:\n\n"
    "Caption: <Caption Start> %s <Caption End>  \nQuestion: %s  <|im_end|>\n<|im_start|>assistant\nThe answer is"
)
ABSTAIN = "Can not answer based on the caption"


def reference_block(item: dict) -> tuple[str, str]:
    """A ground-truth entry as the public client sends it: question, then ``   - X) text`` lines."""
    lines = []
    for k, c in enumerate(item["choices"]):
        c = c.strip()
        lines.append(f"   - {c}" if re.match(r"^[A-F]\)", c, re.I) else f"   - {'ABCDEF'[k]}) {c}")
    return item["question"].strip() + "\n" + "\n".join(lines), item["answer"].strip().upper()


def reference_shuffle(block: str, answer: str, rnd: random.Random) -> tuple[str, str]:
    for letter in "EF":
        block = block.replace(f"\n   - {letter}) {ABSTAIN}", "")
    head, *rest = block.split("\n")
    opts = {}
    for line in rest:
        m = re.search(r"-\s*([A-F])\)\s*(.+)", line.strip())
        if m:
            opts[m.group(1)] = m.group(2)
    gold_text = opts[answer]
    items = list(opts.items())
    rnd.shuffle(items)
    out, new_answer = [head], ""
    for k, (_, text) in enumerate(items):
        out.append(f"   - {'ABCDEF'[k]}) {text}")
        if text == gold_text:
            new_answer = "ABCDEF"[k]
    return "\n".join(out) + f"\n   - F) {ABSTAIN}", new_answer


def reference_parse(reply: str, gold: str) -> int:
    found = re.findall(r"[A-I]", reply)
    return int(bool(found) and found[0] == gold)


def reference_reward(caption: str, ground_truth: list[dict], rnd: random.Random, answer, draws: int = 8):
    qa = [reference_block(item) for item in ground_truth]
    prompts, hits = [], []
    for _ in range(draws):
        block, gold = rnd.choice(qa)
        block, gold = reference_shuffle(block, gold, rnd)
        prompt = PUBLIC_PROMPT % (caption, block)
        prompts.append(prompt)
        hits.append(reference_parse(answer(prompt), gold))
    return sum(hits) / len(hits), prompts


# -- the data, in the published shape, and an answerer whose replies exercise the parse rule ----------

GROUND_TRUTH = [
    {"question": "What colour is the bus?", "choices": ["A) Red", "B) Blue", "C) Green", "D) Yellow"], "answer": "A"},
    {"question": "How many people wait at the stop?", "choices": ["A) One", "B) Two", "C) Three", "D) Four",
                                                                  f"E) {ABSTAIN}"], "answer": "B"},
    {"question": "What is the weather?", "choices": ["Sunny", "Rainy", "Snowy"], "answer": "B"},
]
CAPTIONS = [
    "A red bus at a stop where two people wait in the rain.",
    "A red bus.",  # answers one question; the answerer hedges or strays on the rest
    "  A bus, I think, on a rainy day.  ",  # kept exactly as written: no strip
    "",
]


def scripted_reply(prompt: str) -> str:
    """Names the option whose text the caption states; otherwise replies in ways the public rule
    reads as it reads them: "I think C" (the I wins), a bare G (not an option), or F."""
    caption = prompt.rsplit("<Caption Start> ", 1)[1].split(" <Caption End>", 1)[0].lower()
    block = prompt.rsplit("Question: ", 1)[1]
    options = re.findall(r"^   - ([A-F])\) (.+)$", block, re.M)
    for letter, text in options:
        if text != ABSTAIN and re.search(rf"\b{re.escape(text.lower())}\b", caption):
            return f" {letter}."
    return [" I think C.", " G", " F."][len(caption) % 3]


class RawAnswerer(Backend):
    """Answers each raw prompt with :func:`scripted_reply` and keeps every prompt it was sent."""

    kind = "scripted"
    raw_prompts = True

    def __init__(self) -> None:
        super().__init__("raw-answerer")
        self.prompts: list[str] = []

    def _chat(self, requests):
        assert all(r.prompt is not None and r.messages == [{"role": "user", "content": r.prompt}] for r in requests)
        self.prompts += [r.prompt for r in requests]
        return [ChatResult(texts=[scripted_reply(r.prompt)]) for r in requests]

    def _score_choices(self, requests):  # pragma: no cover - the public layout never scores choices
        raise AssertionError("caprl_public asks in sample mode")


@pytest.fixture
def same_stream(monkeypatch):
    """Both sides draw a caption's questions and orders from ``random.Random(seed)``."""
    import vlrl.methods.caprl.reward as reward_mod

    original = reward_mod.seeded_rng

    def stream(name, *parts):
        return random.Random(1234) if name == "caprl_qa" else original(name, *parts)

    monkeypatch.setattr(reward_mod, "seeded_rng", stream)
    return lambda: random.Random(1234)


def _vlrl(answerer, **settings):
    return build_reward("caprl_qa", answerer=answerer, preset="caprl_public", **settings)


def test_prompts_and_rewards_equal_the_public_reward_draw_for_draw(same_stream):
    backend = RawAnswerer()
    reward = _vlrl(backend)
    for caption in CAPTIONS:
        backend.prompts.clear()
        (got,) = reward.score([caption], questions=[GROUND_TRUTH])
        want, prompts = reference_reward(caption, GROUND_TRUTH, same_stream(), scripted_reply)
        assert backend.prompts == prompts  # byte for byte, in draw order
        assert got.value == pytest.approx(want), caption
    # the cases the public rule reads differently from vlrl's: each reply kind occurred
    replies = {scripted_reply(p) for p in prompts}
    assert {" I think C.", " G", " F."} & replies


def test_the_public_layout_reshuffles_on_every_draw_and_letters_the_abstain_option_f(same_stream):
    backend = RawAnswerer()
    _vlrl(backend, questions_per_caption=32).score([CAPTIONS[0]], questions=[GROUND_TRUTH[:1]])
    blocks = [p.rsplit("Question: ", 1)[1].split("  <|im_end|>")[0] for p in backend.prompts]
    assert len(set(blocks)) > 1  # one question drawn 32 times, in more than one option order
    for b in blocks:
        assert b.splitlines()[0] == "What colour is the bus?"
        assert b.splitlines()[-1] == f"   - F) {ABSTAIN}"  # after 4 real options: A-D, then F
        assert [line[:7] for line in b.splitlines()[1:]] == ["   - A)", "   - B)", "   - C)", "   - D)", "   - F)"]
    stored = _vlrl(RawAnswerer()).backend
    stored_prompt = []
    stored._chat = lambda reqs: stored_prompt.extend(r.prompt for r in reqs) or [ChatResult(texts=[" A"]) for _ in reqs]
    _vlrl(stored).score([CAPTIONS[0]], questions=[GROUND_TRUTH[1:2]])
    assert all(p.count(ABSTAIN) == 3 for p in stored_prompt)  # the 2 examples' E lines + one F; the stored one dropped


def test_the_preset_sends_a_raw_prompt_and_refuses_exact_mode():
    with pytest.raises(ValueError, match="sample mode only"):
        _vlrl(RawAnswerer(), mode="exact")


def test_an_answerer_that_cannot_send_raw_prompts_fails_the_ask_with_the_reason():
    class ChatOnly(RawAnswerer):
        raw_prompts = False

    (s,) = _vlrl(ChatOnly()).score([CAPTIONS[0]], questions=[GROUND_TRUTH])
    assert s.value is None and "cannot send a raw prompt" in s.details["reason"]


def test_token_ids_under_the_real_qwen_tokenizer_are_the_public_prompts(real_qwen_tokenizer, tmp_path, same_stream,
                                                                       monkeypatch):
    """The in-process backend encodes the raw prompt as the public server's engine does: no chat
    template, no system turn, ``<|im_start|>`` as its one special token."""
    from transformers import AutoTokenizer

    from vlrl.core.tiny import make_tiny

    model = make_tiny("qwen2", tmp_path / "lm", seed=0, tokenizer=real_qwen_tokenizer)
    backend = load_backend(f"hf:{model}?device=cpu&dtype=float32")
    seen: list[list[int]] = []
    original = backend._encode

    def spy(texts, images):
        enc = original(texts, images)
        mask = enc["attention_mask"].tolist()
        seen.extend([i for i, m in zip(row, mrow, strict=True) if m] for row, mrow in zip(enc["input_ids"].tolist(), mask,
                                                                                        strict=True))
        return enc

    monkeypatch.setattr(backend, "_encode", spy)
    try:
        (s,) = _vlrl(backend, questions_per_caption=2, max_tokens=2).score([CAPTIONS[0]], questions=[GROUND_TRUTH])
    finally:
        backend.close()
    assert s.value is not None
    _, prompts = reference_reward(CAPTIONS[0], GROUND_TRUTH, same_stream(), lambda p: "", draws=2)
    tok = AutoTokenizer.from_pretrained(real_qwen_tokenizer)
    want = sorted(tok(p, add_special_tokens=False)["input_ids"] for p in prompts)
    assert sorted(seen) == want
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    assert all(ids[0] == im_start and ids.count(im_start) == 2 for ids in seen)  # user and assistant: no system turn


def test_a_question_whose_answer_reads_like_abstaining_is_asked_as_the_public_code_asks_it(same_stream):
    """The public reward asks every question whose answer letter is among its options, "Not
    visible" or "Unknown brand" as gold included; dropping them (vlrl's own rule) would draw from
    another question set, so every draw after the first would differ."""
    truth = GROUND_TRUTH + [
        {"question": "What does the sign on the bus say?", "choices": ["A) Stop", "B) Not visible", "C) Exit"],
         "answer": "B"},
        {"question": "Which company runs the bus?", "choices": ["A) Unknown brand", "B) City Lines", "C) Metro"],
         "answer": "A"},
    ]
    backend = RawAnswerer()
    reward = _vlrl(backend, questions_per_caption=16)
    for caption in ("A red bus; its sign is not visible, unknown brand.", "A red bus."):
        backend.prompts.clear()
        (got,) = reward.score([caption], questions=[truth])
        want, prompts = reference_reward(caption, truth, same_stream(), scripted_reply, draws=16)
        assert got.details["n_questions"] == len(truth)
        assert backend.prompts == prompts
        assert got.value == pytest.approx(want)
    # the stored public abstain line as the gold answer cannot be shown (the public code strips it):
    # that question alone is dropped, with its reason
    stored = {"question": "How many?", "choices": ["A) One", "B) Two", "C) Three", "D) Four", f"E) {ABSTAIN}"],
              "answer": "E"}
    (s,) = _vlrl(RawAnswerer()).score([CAPTIONS[0]], questions=[GROUND_TRUTH + [stored]])
    assert s.value is not None and s.details["n_questions"] == len(GROUND_TRUTH) and s.details["invalid_questions"] == 1
