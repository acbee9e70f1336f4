"""When the exact letter route is taken, and what an ask with no letter information scores.

No vLLM here: a loopback server that renders the real template and lists logprobs that hold no
letter, and has no ``/tokenize`` (like any non-vLLM server). The reward must call that a parse
failure, not give the uniform chance a renormalisation would invent.
"""

from __future__ import annotations

import math

import pytest

from tests.support.servers import TemplateServer
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
