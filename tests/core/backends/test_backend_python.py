"""``py:`` backends (Python code as a model) and the hf backend's public prompt/choice-token API."""

from __future__ import annotations

import pytest

from vlrl.core.backends import (
    Backend,
    BackendError,
    ChatRequest,
    ChoiceRequest,
    SamplingParams,
    load_backend,
    parse_spec,
)
from vlrl.core.backends.python import FunctionBackend

HERE = __name__


# -- factories the specs below name ---------------------------------------------------------------


def echo(prefix: str = "echo"):
    """Reply with the prefix and the last user text; 'boom' raises, 'junk' returns a non-string."""

    def reply(messages, sampling):
        last = next(m for m in reversed(messages) if m["role"] == "user")
        content = last["content"]
        text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
        if "boom" in text:
            raise RuntimeError("the rule set has no answer\nfor this")
        if "junk" in text:
            return 42
        if "many" in text:
            return [f"{prefix} {k}" for k in range(sampling.n)]
        return f"{prefix}: {text}"

    return reply


def answer_b():
    """A reader that always answers B, and records the pre-fill it was shown."""
    seen = []

    def reply(messages, sampling):
        seen.append(messages[-1])
        return " B because"

    reply.seen = seen
    return reply


class Fixed(FunctionBackend):
    pass


def ready_backend(model: str = "fixed"):
    return Fixed(lambda m, s: "ready", name=model)


# -- tests ------------------------------------------------------------------------------------------


def test_spec_with_options_chats_through_the_factory():
    assert parse_spec(f"py:{HERE}:echo?prefix=hi") == ("py", f"{HERE}:echo", {"prefix": "hi"})
    b = load_backend(f"py:{HERE}:echo?prefix=hi")
    res = b.chat([
        ChatRequest([{"role": "user", "content": "a red circle"}], id="one"),
        ChatRequest([{"role": "user", "content": [{"type": "image", "image": "x.png"}, {"type": "text", "text": "many"}]}],
                    SamplingParams(n=3, temperature=1.0), id="three"),
        ChatRequest([{"role": "user", "content": "same"}], SamplingParams(n=2, temperature=1.0), id="copied"),
    ])
    assert res[0].ok and res[0].text == "hi: a red circle"
    assert res[1].texts == ["hi 0", "hi 1", "hi 2"]
    assert res[2].texts == ["hi: same", "hi: same"]
    assert b.stats.snapshot()["requests"] == 3 and b.stats.snapshot()["failures"] == 0


def test_a_failing_reply_is_that_requests_one_line_error():
    b = load_backend(f"py:{HERE}:echo")
    res = b.chat([ChatRequest([{"role": "user", "content": "boom"}], id="r1"),
                  ChatRequest([{"role": "user", "content": "junk"}], id="r2"),
                  ChatRequest([{"role": "user", "content": "fine"}], id="r3")])
    assert not res[0].ok and res[0].error.startswith("r1:") and "\n" not in res[0].error
    assert "no answer for this" in res[0].error
    assert not res[1].ok and "not a string" in res[1].error
    assert res[2].ok and res[2].text == "echo: fine"
    assert b.stats.snapshot()["failures"] == 2


def test_choice_scoring_reads_the_reply_after_the_prefill():
    b = load_backend(f"py:{HERE}:answer_b")
    res = b.score_choices([
        ChoiceRequest([{"role": "user", "content": "which?"}], [" A", " B", " C"], prefix="The answer is", id="q"),
    ])
    assert res[0].ok and res[0].probs == {" A": 0.0, " B": 1.0, " C": 0.0}
    assert res[0].argmax() == " B" and not res[0].exact  # read from text, never claimed as logits
    assert b.reply.seen[-1] == {"role": "assistant", "content": "The answer is"}
    none = load_backend(f"py:{HERE}:echo").score_choices([ChoiceRequest([{"role": "user", "content": "x"}], ["A", "B"], id="z")])
    assert not none[0].ok and none[0].error.startswith("z:") and "names none" in none[0].error


def test_a_factory_may_return_a_ready_backend():
    b = load_backend(f"py:{HERE}:ready_backend?model=m1")
    assert isinstance(b, Fixed) and b.model == "m1"
    assert b.chat([ChatRequest([{"role": "user", "content": "x"}])])[0].text == "ready"


@pytest.mark.parametrize(("spec", "match"), [
    ("py:nomodule", "package.module:factory"),
    ("py:vlrl_no_such_module_xyz:f", "cannot import"),
    (f"py:{HERE}:no_such_factory", "no callable"),
    (f"py:{HERE}:HERE", "no callable"),
    (f"py:{HERE}:echo?colour=red", "does not take the options"),
    (f"py:{HERE}:Backend", "Backend"),
])
def test_bad_python_specs_fail_when_built(spec, match):
    with pytest.raises((BackendError, TypeError), match=match):
        load_backend(spec)


def test_options_are_part_of_the_cache_identity(tmp_path):
    a = load_backend(f"py:{HERE}:echo?prefix=one", cache=tmp_path)
    b = load_backend(f"py:{HERE}:echo?prefix=two", cache=tmp_path)
    req = [ChatRequest([{"role": "user", "content": "q"}])]
    assert a.chat(req)[0].text == "one: q"
    assert b.chat(req)[0].text == "two: q"  # not the first stand-in's cached answer
    assert isinstance(a, Backend)


def test_hf_render_prompt_and_choice_token_are_what_score_choices_reads(tiny_lm):
    """A model trained on render_prompt + choice_token is scored on exactly those positions."""
    import torch

    b = load_backend(f"hf:{tiny_lm}?device=cpu&dtype=float32")
    msgs = [{"role": "user", "content": "Caption: a red circle.\nQuestion: what colour?\nA. red\nB. blue"}]
    prefix = "The answer is"
    text = b.render_prompt(msgs) + prefix
    assert "a red circle" in text and text != msgs[0]["content"] + prefix  # the chat template was applied
    tokens = [b.choice_token(text, c) for c in (" A", " B")]
    assert len(set(tokens)) == 2
    variants = [b.choice_token_ids(text, c) for c in (" A", " B")]
    assert all(t in v for t, v in zip(tokens, variants, strict=True))  # the label is one of the counted tokens
    ids = b.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        probs = torch.softmax(b.net(input_ids=ids).logits[0, -1].float(), -1)  # T=1, the request's default
    mass = torch.stack([probs[v].sum() for v in variants])
    mine = mass / mass.sum()
    got = b.score_choices([ChoiceRequest(msgs, [" A", " B"], prefix=prefix)])[0]
    assert got.exact
    assert got.probs[" A"] == pytest.approx(float(mine[0]), abs=1e-4)
    assert got.probs[" B"] == pytest.approx(float(mine[1]), abs=1e-4)
    # images render as placeholders without being loaded (training text needs no pixels)
    assert b.render_prompt([{"role": "user", "content": [{"type": "text", "text": "hi"}]}]).count("hi") == 1
