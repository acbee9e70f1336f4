"""When the exact letter route is taken, and what an ask with no letter information scores.

No vLLM here: a loopback server that renders the real template and lists logprobs that hold no
letter, and has no ``/tokenize`` (like any non-vLLM server). The reward must call that a parse
failure, not give the uniform chance a renormalisation would invent.
"""

from __future__ import annotations

import math

import pytest

from tests.support.servers import TemplateServer
from vlrl.core.backends import ChoiceRequest
from vlrl.core.backends.openai_exact import needs_exact
from vlrl.core.backends.openai_http import OpenAIBackend
from vlrl.methods.caprl.ask import Ask, ask
from vlrl.methods.caprl.mcq import normalize_mcq, present

LETTERS = [" A", " B", " C"]


def test_listed_letters_holding_the_mass_need_no_exact_route():
    confident = [(" B", math.log(0.95)), (" A", math.log(0.04)), ("x", math.log(0.01 - 1e-9))]
    assert not needs_exact(confident, LETTERS, listed_mass=0.99)


def test_a_top_20_without_letters_or_with_a_fat_tail_needs_it():
    flat = [(f"t{i}", math.log(1 / 2048)) for i in range(20)]
    assert needs_exact(flat, LETTERS, listed_mass=0.0)
    some = [(" B", math.log(0.3)), ("x", math.log(0.2))]  # half the mass unlisted, letters may hide there
    assert needs_exact(some, LETTERS, listed_mass=0.3)


@pytest.fixture(scope="module")
def tiny_tok(tiny_lm):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_lm))


def test_no_letter_among_listed_logprobs_is_a_parse_failure_not_chance(tiny_tok):
    pres = present(normalize_mcq({"question": "Colour?", "options": ["red", "blue", "green"], "answer": "A"}), None)
    a = Ask([{"role": "user", "content": "Question: Colour?\n" + "\n".join(pres.lines())}], pres, id="q0")
    with TemplateServer(tiny_tok, top={" is": -0.1, " the": -2.5}) as srv:
        b = OpenAIBackend(srv.base_url, "answerer", backoff=0.01, backoff_max=0.05)
        try:
            (ans,) = ask(b, [a], mode="exact", min_letter_mass=0.0)
        finally:
            b.close()
    assert ans.error is None
    assert ans.parse_failure and ans.correct == 0.0 and ans.letter_mass == 0.0
    assert b._exact.unsupported  # asked /tokenize once, got no token list, kept the listed logprobs


def test_looked_up_letters_do_not_shrink_the_unlisted_tail_at_low_temperature():
    """The letters the exact route adds sit far below the list; the unlisted tokens are bounded by
    the least likely *listed* one, so the letter mass at T=0.6 must not depend on how unlikely the
    looked-up letters are."""
    from vlrl.core.backends.openai_wire import probs_from_top_logprobs

    listed = [("x", math.log(0.5)), ("y", math.log(0.3))]
    letters = [(" A", math.log(1e-6)), (" B", math.log(2e-6))]
    t = 0.6
    _, mass = probs_from_top_logprobs(listed + letters, LETTERS, t, tail_from=listed)
    tail = 1 - 0.8 - 3e-6
    z = 0.5 ** (1 / t) + 0.3 ** (1 / t) + (1e-6) ** (1 / t) + (2e-6) ** (1 / t) + tail * 0.3 ** (1 / t - 1)
    assert mass == pytest.approx(((1e-6) ** (1 / t) + (2e-6) ** (1 / t)) / z, rel=1e-9)
    _, distorted = probs_from_top_logprobs(listed + letters, LETTERS, t)  # p_min = 1e-6: the tail all but vanishes
    assert distorted > 1.15 * mass  # 20% too high here; the further below the list, the worse


def test_a_failed_letter_lookup_is_not_kept_for_later_asks():
    """Never cache a failure: a /tokenize that failed once is asked again by the next ask."""
    import asyncio

    from vlrl.core.backends.openai_exact import ExactLetters

    class Client:
        calls = 0

        async def post(self, url, body=None, cast_to=None):
            Client.calls += 1
            if Client.calls == 1:
                raise ConnectionError("reset by peer")
            return {"tokens": [7]}

    ex = ExactLetters(Client(), "http://127.0.0.1:1", "m", asyncio.Semaphore(4), timeout=5.0)

    async def lookup():
        return await ex._candidates(" A")

    with pytest.raises(ConnectionError):
        asyncio.run(lookup())
    assert asyncio.run(lookup()) == [("A", 7)]


def test_a_backend_that_reports_no_letter_mass_is_taken_at_its_probabilities():
    """A third-party backend may return exact probabilities without a mass: that is no parse failure."""
    from tests.support.scripted import Scripted
    from vlrl.core.backends.base import ChoiceResult

    pres = present(normalize_mcq({"question": "Colour?", "options": ["red", "blue", "green"], "answer": "B"}), None)
    probs = {L: (i + 1) / sum(range(1, len(pres.letters) + 1)) for i, L in enumerate(pres.letters)}
    a = Ask([{"role": "user", "content": "Colour?"}], pres, id="q0")
    (ans,) = ask(Scripted("no-mass", choose=lambda r: ChoiceResult(probs=probs, method="logits")), [a], mode="exact")
    assert not ans.parse_failure and ans.letter_mass is None
    assert ans.correct == pytest.approx(probs[pres.gold])
    (zero,) = ask(Scripted("zero", choose=lambda r: ChoiceResult(probs=probs, method="logits", mass=0.0)), [a], mode="exact")
    assert zero.parse_failure and zero.correct == 0.0


def test_http_scores_cached_before_the_exact_route_are_not_replayed(tmp_path):
    """A cache from before the exact letter route holds listed-logprob scores that can miss every
    letter: the new key leaves them unread, and the fresh exact score is stored and replayed."""
    from tests.support.scripted import Scripted
    from vlrl.core.backends.base import ChoiceResult, request_key
    from vlrl.core.backends.cache import CachedBackend, ResponseCache

    class HTTPLike(Scripted):
        def choice_method(self) -> str:
            return "logprobs"

    inner = HTTPLike("http-like", choose=lambda r: ChoiceResult(probs={"A": 0.9, "B": 0.1}, method="logprobs", mass=0.5))
    req = ChoiceRequest([{"role": "user", "content": "q"}], ["A", "B"], id="q0")
    old_payload = {"op": "choices", "messages": req.messages, "choices": req.choices, "prefix": req.prefix,
                   "samples": req.samples, "seed": req.seed, "method": "logprobs"}
    cache = ResponseCache(tmp_path / "cache")
    cache.put_many({request_key(inner.identity(), old_payload): {"probs": {"A": 0.5, "B": 0.5}, "method": "logprobs", "mass": 0.0}})
    cached = CachedBackend(inner, cache)
    (first,) = cached.score_choices([req])
    assert not first.cached and first.probs["A"] == 0.9 and len(inner.requests) == 1
    (again,) = cached.score_choices([req])
    assert again.cached and again.probs["A"] == 0.9 and len(inner.requests) == 1
