"""The openai backend against a real vLLM server, checked against the in-process ``hf:`` backend.

Same tiny weights on both sides (the session's tiny Qwen2, float32). What must hold:

* exact letter probabilities agree within 1e-3 per option, although this random model's letters are
  not among the 20 logprobs vLLM lists (read by ``logprob_token_ids``, or by ``prompt_logprobs`` on
  servers without it: vlrl/core/backends/openai_exact.py);
* a pre-filled assistant turn is continued as vLLM renders the real template: the same prompt tokens
  as the in-process rendering, the same greedy continuation;
* ``n`` > 1 comes back from one request, and a seed gives the same samples again;
* sampled first tokens follow the exact distribution (Pearson chi-square, α = 0.001 per seed).
"""

from __future__ import annotations

import pytest

from tests.support.servers import FaultProxy
from vlrl.core.backends import ChatRequest, ChoiceRequest, SamplingParams, load_backend
from vlrl.core.backends.base import choice_of_token
from vlrl.core.stats import chi_square_gof

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

LETTERS = [" A", " B", " C", " D", " E"]
PREFILL = "The answer is"


def question(i: int) -> list[dict]:
    return [{"role": "user", "content": f"Question {i}: which one is it?\n(A) red\n(B) blue\n(C) green\n(D) cat\n(E) dog"}]


@pytest.fixture(scope="module")
def hf(tiny_lm):
    b = load_backend(f"hf:{tiny_lm}?device=cpu&dtype=float32")
    yield b
    b.close()


@pytest.fixture
def oa(vllm_lm):
    b = load_backend(f"openai:{vllm_lm.base_url}@{vllm_lm.model}?timeout=300")
    yield b
    b.close()


@pytest.mark.parametrize("route", ["logprob_token_ids", "prompt_logprobs"])
def test_exact_letter_probabilities_match_in_process_beyond_the_top_20(hf, oa, route, tiny_lm):
    from transformers import AutoTokenizer

    from vlrl.core.backends.openai_exact import variant_texts

    reqs = [ChoiceRequest(question(i), LETTERS, prefix=PREFILL, id=f"q{i}") for i in range(3)]
    want = hf.score_choices(reqs)
    if route == "prompt_logprobs":  # the fallback's own path, as taken once a server ignored the field
        oa.score_choices(reqs[:1])
        oa._exact.named = False
    got = oa.score_choices(reqs)
    for w, g in zip(want, got, strict=True):
        assert w.ok and g.ok, g.error
        assert g.method == "logprobs" and g.exact
        assert g.mass == pytest.approx(w.mass, abs=1e-5)
        for c in LETTERS:
            assert g.probs[c] == pytest.approx(w.probs[c], abs=1e-3)
    # the letters were read through the exact route: each letter's one-token variants are those the
    # model's own tokenizer has
    tok = AutoTokenizer.from_pretrained(str(tiny_lm))
    one_token = {L: {tuple(ids) for t in variant_texts(L) if len(ids := tok(t, add_special_tokens=False)["input_ids"]) == 1}
                 for L in "ABCDE"}
    assert {k: len(v) for k, v in oa._exact.variants.items()} == {L: len(ids) for L, ids in one_token.items()}
    if route == "logprob_token_ids":
        assert oa._exact.named is True  # vLLM 0.32 honours the field: found by asking, not assumed


def test_letters_are_not_listed_in_the_top_20(vllm_lm):
    """Why the exact route exists: a plain top_logprobs request says nothing about the letters here."""
    from openai import OpenAI

    client = OpenAI(base_url=vllm_lm.base_url, api_key="EMPTY")
    resp = client.chat.completions.create(
        model=vllm_lm.model, messages=question(0) + [{"role": "assistant", "content": PREFILL}], max_tokens=1,
        logprobs=True, top_logprobs=20, extra_body={"continue_final_message": True, "add_generation_prompt": False},
    )
    top = resp.choices[0].logprobs.content[0].top_logprobs
    assert len(top) == 20
    assert not [t.token for t in top if choice_of_token(t.token, LETTERS)]


def test_prefill_is_continued_as_the_template_renders_it(hf, oa, tiny_lm, vllm_lm):
    import json
    import urllib.request

    from transformers import AutoTokenizer

    msgs = question(1) + [{"role": "assistant", "content": PREFILL}]
    tok = AutoTokenizer.from_pretrained(str(tiny_lm))
    ids = tok.apply_chat_template(msgs, tokenize=True, continue_final_message=True, add_generation_prompt=False)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    body = {"model": vllm_lm.model, "messages": msgs, "continue_final_message": True, "add_generation_prompt": False}
    req = urllib.request.Request(vllm_lm.root + "/tokenize", json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        served = json.loads(r.read())["tokens"]
    assert served == ids  # vLLM renders the turn open, ending in the pre-fill, like the in-process backend
    assert tok.decode(ids).endswith("<|im_start|>assistant\n" + PREFILL)
    greedy = SamplingParams(max_tokens=8)
    (w,), (g,) = hf.chat([ChatRequest(msgs, greedy)]), oa.chat([ChatRequest(msgs, greedy)])
    assert w.ok and g.ok, g.error
    assert oa.supports_continue is True
    assert g.prompt_tokens == len(ids) == w.prompt_tokens
    assert tok(g.text)["input_ids"] == tok(w.text)["input_ids"]


def test_n_samples_from_one_request_and_seeds_repeat(vllm_lm):
    with FaultProxy(vllm_lm.root) as proxy:
        b = load_backend(f"openai:{proxy.root}/v1@{vllm_lm.model}?timeout=300")
        try:
            def draw(seed: int) -> list[str]:
                sp = SamplingParams(max_tokens=6, temperature=1.0, n=4, seed=seed)
                (r,) = b.chat([ChatRequest(question(2), sp)])
                assert r.ok, r.error
                return r.texts

            a, again, other = draw(11), draw(11), draw(5011)
        finally:
            b.close()
    assert len(a) == 4 and len(set(a)) > 1
    assert again == a and other != a
    assert b.supports_n is True
    assert len(proxy.posts()) == 3  # one HTTP request per draw of four


def test_sampled_first_tokens_follow_the_exact_distribution(oa):
    (ex,) = oa.score_choices([ChoiceRequest(question(3), LETTERS, prefix=PREFILL)])
    assert ex.ok and ex.exact
    probs = [ex.mass * ex.probs[c] for c in LETTERS] + [1.0 - ex.mass]
    msgs = question(3) + [{"role": "assistant", "content": PREFILL}]
    n = 3000
    # vLLM seeds sample i of a request with seed + i: seeds n apart share no sample
    for seed in (1, 1 + n, 1 + 2 * n):
        (r,) = oa.chat([ChatRequest(msgs, SamplingParams(max_tokens=1, temperature=1.0, n=n, seed=seed))])
        assert r.ok and len(r.texts) == n, r.error
        counts = [0] * (len(LETTERS) + 1)
        for t in r.texts:
            c = choice_of_token(t, LETTERS)
            counts[LETTERS.index(c) if c else -1] += 1
        stat, p = chi_square_gof(counts, probs)
        assert p > 1e-3, f"seed {seed}: counts {counts} vs probabilities {probs}: chi2={stat:.2f}, p={p:.2g}"
