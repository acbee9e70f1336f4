"""Reward registry: names, dotted paths, TRL's call contract, sub-score logging."""

from __future__ import annotations

import pytest

from vlrl.rewards import Reward, Score, build_reward, register_reward


@register_reward("_test_len")
class _LenReward(Reward):
    name = "_test_len"

    def __init__(self, scale: float = 1.0):
        self.scale = scale

    def score(self, completions, **columns):
        return [Score(len(c) * self.scale if c else None, {"chars": len(c), "empty": not c}) for c in completions]


def user_reward(prompts, completions, bonus=0.0, **kw):
    return [float(len(c[0]["content"])) + bonus for c in completions]


def test_build_by_name_keeps_trl_contract():
    r = build_reward("_test_len", scale=2.0)
    logged = {}
    out = r(prompts=[[{"role": "user", "content": "p"}]] * 2,
            completions=[[{"role": "assistant", "content": "abc"}], [{"role": "assistant", "content": ""}]],
            completion_ids=[[1], [2]], log_metric=lambda k, v: logged.__setitem__(k, v), trainer_state=None, extra_col=[1, 2])
    assert out == [6.0, None]
    assert r.__name__ == "_test_len"
    assert logged["_test_len/chars"] == 1.5 and logged["_test_len/none_rate"] == 0.5 and logged["_test_len/empty"] == 0.5


def test_dotted_user_function_with_settings():
    r = build_reward("tests.rewards.test_reward_registry:user_reward", bonus=1.0)
    assert r(completions=[[{"role": "assistant", "content": "ab"}]]) == [3.0]
    assert r.__name__ == "user_reward"


def test_unknown_names_fail_clearly():
    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        build_reward("nope")
    with pytest.raises(ValueError, match="cannot import"):
        build_reward("no_such_pkg.mod:fn")


def test_close_closes_only_backends_the_reward_opened(tiny_lm):
    """A backend built from a spec is closed (and logs accounting); one handed in stays usable."""
    from vlrl.core.backends import ChatRequest, SamplingParams, load_backend

    mine = load_backend(f"hf:{tiny_lm}")
    given = build_reward("caprl_qa", answerer=mine, mode="exact")
    _ = given.backend
    given.close()
    assert mine.chat([ChatRequest([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=2))])[0].ok

    owned = build_reward("caprl_qa", answerer=f"hf:{tiny_lm}", mode="exact", guards=True)
    backend = owned.inner.backend
    owned.close()
    assert backend.net is None
