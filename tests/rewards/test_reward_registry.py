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


TRL_STYLE = """
def strict(prompts, completions, completion_ids, trainer_state, log_metric, log_extra, answer, **kwargs):
    log_metric("strict/step", float(trainer_state.global_step))
    log_extra("seen", [len(ids) for ids in completion_ids])
    return [float(len(ids)) + (0.5 if c[0]["content"] == a else 0.0)
            for c, ids, a in zip(completions, completion_ids, answer)]
"""


def test_user_rewards_get_trls_whole_call(tmp_path, monkeypatch):
    """A ``pkg.mod:fn`` reward written to TRL's contract (completion_ids, trainer_state, log_metric,
    log_extra as parameters) runs as it would in TRL, behind guards too (#30 finding 10)."""
    (tmp_path / "trl_style_reward.py").write_text(TRL_STYLE)
    monkeypatch.syspath_prepend(str(tmp_path))

    class State:
        global_step = 7

    for guards in (None, {"policy": "penalty", "enabled": ["self_praise"]}):
        reward = build_reward("trl_style_reward:strict", **({"guards": guards} if guards else {}))
        logged, extra = {}, {}
        values = reward(prompts=["p", "p"], completions=[[{"role": "assistant", "content": "42"}],
                                                         [{"role": "assistant", "content": "41"}]],
                        completion_ids=[[1, 2], [1, 2, 3]], trainer_state=State(), log_metric=logged.__setitem__,
                        log_extra=extra.__setitem__, answer=["42", "42"])
        assert values == [2.5, 3.0]
        assert logged["strict/step"] == 7.0 and extra["seen"] == [2, 3]
