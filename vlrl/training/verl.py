"""vlrl's registered rewards as a verl ``compute_score``, for runs that outgrow one node on TRL.

verl (0.9) loads a custom reward from ``reward.custom_reward_function.path`` / ``.name`` and calls it
once per sample as ``compute_score(data_source, solution_str, ground_truth, extra_info, **kw)``
(sync or async), expecting a float or a dict with ``"score"``. Every verl 0.9 reward manager
(``naive``, ``dapo``, ``limited``, ...) calls it per sample, from worker threads of several reward
worker processes; there is no list-calling batch manager in verl 0.9, so vlrl has no batch form.
This module gives the same reward objects TRL training uses to that call, so a recipe's reward
block moves to verl unchanged:

* which reward: ``kw["reward"]`` (verl forwards ``custom_reward_function.reward_kwargs`` as keyword
  arguments), else ``extra_info["vlrl_reward"]``, else the ``VLRL_VERL_REWARD`` environment
  variable, else ``hfrrf``. The named shortcuts :func:`hfrrf`, :func:`caprl_qa`,
  :func:`rubicap_rubric` fix the reward by function name, for configs without ``reward_kwargs``;
* its settings: ``kw["settings"]`` (a mapping), else ``VLRL_VERL_REWARD_SETTINGS`` (JSON). verl
  hands ``reward_kwargs`` over as OmegaConf containers; they are converted to plain dicts and lists
  (``OmegaConf.to_container``) first, or nested blocks such as ``guards: {policy: veto}`` would be
  silently ignored;
* columns: ``ground_truth`` becomes the reward's answer column (``answer``), and every key of
  ``extra_info`` (``questions``, ``rubrics``, ``choices``, ...) is passed as a column, as TRL would
  pass dataset columns.

The dict returned holds ``score`` (a float; a "not applicable" ``None`` becomes 0.0 with
``applicable: 0.0`` so verl's float tensors never see ``None``) and the reward's numeric sub-scores
under a **fixed key schema per reward** (:func:`detail_keys`: e.g. hfrrf's ``format_ok``,
``answer_ok``, ``truncated``, ``think_too_short``, plus ``guard/*`` keys when guards are set), NaN
where a sample has no value. The schema depends only on the reward and its settings, never on the
samples a process happened to see, because verl stacks every sample's extra info by the keys of the
batch's first sample, across processes. Rewards are built once per process per (name, settings) and
reused, so a judge backend is not rebuilt per sample. See docs/verl.md.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

_CACHE: dict[str, Any] = {}
_LOCK = threading.Lock()

# Numeric sub-scores each registered reward may report (vlrl.rewards Score.details).
DETAIL_KEYS: dict[str, tuple[str, ...]] = {
    "hfrrf": ("answer_ok", "format_ok", "think_too_short", "truncated"),
    "caprl_qa": ("cannot_answer_rate", "qa_acc"),
    "rubicap_rubric": ("judge_failures", "pass_rate", "pass_rate_critical", "pass_rate_important", "pass_rate_minor",
                       "vetoed", "weighted_pass_rate"),
}


def _reward(name: str, settings: Mapping[str, Any]):
    from vlrl.rewards import build_reward

    key = json.dumps([name, settings], sort_keys=True, default=str)
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = build_reward(name, **dict(settings))
        return _CACHE[key]


def detail_keys(reward) -> tuple[str, ...]:
    """The fixed extra-info keys of one reward: score, applicable, its sub-scores, its guards'."""
    inner = getattr(reward, "inner", reward)
    keys = list(DETAIL_KEYS.get(getattr(inner, "name", ""), ()))
    guards = getattr(reward, "guards", None)
    names = getattr(guards, "names", None)
    if names is not None:
        keys += [f"guard/{n}" for n in names] + ["guard/any", "guard/penalty"]
    return ("score", "applicable", *sorted(set(keys)))


def plain(obj: Any) -> Any:
    """OmegaConf containers (what verl passes) → plain dicts and lists, recursively."""
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(obj):
            return OmegaConf.to_container(obj, resolve=True)
    except ImportError:
        pass
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):  # numpy arrays from parquet rows
        return plain(obj.tolist())
    return obj


def _choose(kw: dict[str, Any], extra_info: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    kw = plain(kw)
    name = kw.pop("reward", None) or (extra_info or {}).get("vlrl_reward") or os.environ.get("VLRL_VERL_REWARD") or "hfrrf"
    settings = kw.pop("settings", None)
    if settings is None:
        env = os.environ.get("VLRL_VERL_REWARD_SETTINGS")
        settings = json.loads(env) if env else {}
    if not isinstance(settings, Mapping):
        raise TypeError(f"vlrl verl adapter: settings must be a mapping, got {type(settings).__name__}")
    return str(name), dict(settings)


def _to_dict(score, keys: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {k: float("nan") for k in keys}
    out["score"] = 0.0 if score.value is None else float(score.value)
    out["applicable"] = 0.0 if score.value is None else 1.0
    for k, v in score.details.items():
        if k not in out or k in ("score", "applicable"):
            continue  # outside the schema: every process must report the same keys
        if isinstance(v, bool):
            v = float(v)
        if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
            out[k] = float(v)
    return out


# keys verl's reward managers add to extra_info themselves: not dataset columns
VERL_EXTRA_KEYS = {"vlrl_reward", "num_turns", "rollout_reward_scores", "tool_extra_fields"}


def _columns(reward, ground_truths: Sequence[Any], extra_infos: Sequence[Mapping[str, Any] | None]) -> dict[str, list]:
    answer_col = getattr(reward, "answer_column", "answer")
    cols: dict[str, list] = {answer_col: [plain(g) for g in ground_truths]}
    keys = {k for e in extra_infos if e for k in e if k not in VERL_EXTRA_KEYS}
    for k in keys:
        if k == answer_col:
            continue
        cols[k] = [plain((e or {}).get(k)) for e in extra_infos]
    return cols


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """verl's per-sample signature. Never raises on a bad sample: a failed reward scores 0.0."""
    name, settings = _choose(dict(kw), extra_info)
    reward = _reward(name, settings)
    try:
        (score,) = reward.score([solution_str], **_columns(reward, [ground_truth], [extra_info]), data_source=[data_source])
    except Exception as e:  # noqa: BLE001 - verl would kill the whole step for one bad sample
        from vlrl.rewards import Score

        score = Score(None, {})
        import logging

        logging.getLogger(__name__).warning("reward %s failed on a %s sample: %s", name, data_source, e)
    return _to_dict(score, detail_keys(reward))


async def compute_score_async(data_source, solution_str, ground_truth, extra_info=None, **kw) -> dict[str, Any]:
    """Async form (verl awaits async reward functions concurrently); runs the reward in a thread."""
    return await asyncio.to_thread(compute_score, data_source, solution_str, ground_truth, extra_info, **kw)


def _named(reward_name: str):
    def fn(data_source, solution_str, ground_truth, extra_info=None, **kw):
        return compute_score(data_source, solution_str, ground_truth, extra_info, reward=reward_name, **kw)

    fn.__name__ = reward_name
    fn.__doc__ = f"``compute_score`` fixed to the ``{reward_name}`` reward (``custom_reward_function.name: {reward_name}``)."
    return fn


hfrrf = _named("hfrrf")
caprl_qa = _named("caprl_qa")
rubicap_rubric = _named("rubicap_rubric")

__all__ = ["caprl_qa", "compute_score", "compute_score_async", "detail_keys", "hfrrf", "plain", "rubicap_rubric"]
