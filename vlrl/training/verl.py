"""vlrl's registered rewards as a verl ``compute_score``, for runs that outgrow one node on TRL.

verl (0.9) loads a custom reward from ``reward.custom_reward_function.path`` / ``.name`` and calls it
once per sample as ``compute_score(data_source, solution_str, ground_truth, extra_info, **kw)``
(sync or async), expecting a float or a dict with ``"score"``; its batch reward manager instead
calls it with lists. This module gives the same reward objects TRL training uses to both call
styles, so a recipe's reward block moves to verl unchanged:

* which reward: ``kw["reward"]`` (verl forwards ``custom_reward_function.reward_kwargs`` as keyword
  arguments), else ``extra_info["vlrl_reward"]``, else the ``VLRL_VERL_REWARD`` environment
  variable, else ``hfrrf``. The named shortcuts :func:`hfrrf`, :func:`caprl_qa`,
  :func:`rubicap_rubric` fix the reward by function name, for configs without ``reward_kwargs``;
* its settings: ``kw["settings"]`` (a mapping), else ``VLRL_VERL_REWARD_SETTINGS`` (JSON);
* columns: ``ground_truth`` becomes the reward's answer column (``answer``), and every key of
  ``extra_info`` (``questions``, ``rubrics``, ``choices``, ...) is passed as a column, as TRL would
  pass dataset columns.

The dict returned holds ``score`` (a float; a "not applicable" ``None`` becomes 0.0 with
``applicable: 0.0`` so verl's float tensors never see ``None``) and the reward's numeric
sub-scores, which verl logs as reward extra info; every dict of one reward carries the same keys
(NaN where a sample has no value, e.g. not applicable), since verl stacks them per key. Rewards
are built once per process per (name, settings) and reused, so a judge backend is not rebuilt per
sample. See docs/verl.md.
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
_KEYS: dict[int, set[str]] = {}  # id(reward) -> every numeric detail key it has reported in this process
_LOCK = threading.Lock()


def _reward(name: str, settings: Mapping[str, Any]):
    from vlrl.rewards import build_reward

    key = json.dumps([name, settings], sort_keys=True, default=str)
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = build_reward(name, **dict(settings))
        return _CACHE[key]


def _uniform(reward, out: dict[str, Any]) -> dict[str, Any]:
    """Give every per-sample dict of one reward the same keys (NaN where a sample has no value).

    verl collects ``reward_extra_info[key].append(value)`` per sample (naive manager) or reads the
    keys of sample 0 (reward loop): a key missing from one sample (a "not applicable" score, a
    judge failure) makes ragged columns and stops the step.
    """
    with _LOCK:
        known = _KEYS.setdefault(id(reward), set())
        known.update(out)
        keys = sorted(known)
    return {k: out.get(k, float("nan")) for k in keys}


def _choose(kw: dict[str, Any], extra_info: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    name = kw.pop("reward", None) or (extra_info or {}).get("vlrl_reward") or os.environ.get("VLRL_VERL_REWARD") or "hfrrf"
    settings = kw.pop("settings", None)
    if settings is None:
        env = os.environ.get("VLRL_VERL_REWARD_SETTINGS")
        settings = json.loads(env) if env else {}
    if not isinstance(settings, Mapping):
        raise TypeError(f"vlrl verl adapter: settings must be a mapping, got {type(settings).__name__}")
    return str(name), dict(settings)


def _to_dict(score, applicable_keys: Sequence[str] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"score": 0.0 if score.value is None else float(score.value),
                           "applicable": 0.0 if score.value is None else 1.0}
    for k, v in score.details.items():
        if isinstance(v, bool):
            v = float(v)
        if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
            out[k] = float(v)
    for k in applicable_keys:  # batch mode: one key set for every sample
        out.setdefault(k, float("nan"))
    return out


def _columns(reward, ground_truths: Sequence[Any], extra_infos: Sequence[Mapping[str, Any] | None]) -> dict[str, list]:
    answer_col = getattr(reward, "answer_column", "answer")
    cols: dict[str, list] = {answer_col: list(ground_truths)}
    keys = {k for e in extra_infos if e for k in e if k != "vlrl_reward"}
    for k in keys:
        if k == answer_col:
            continue
        cols[k] = [(e or {}).get(k) for e in extra_infos]
    return cols


def compute_score_batch(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
    **kw: Any,
) -> list[dict[str, Any]]:
    """List form for verl's batch reward manager: one reward call (one judge batch) for all samples."""
    extra_infos = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    name, settings = _choose(dict(kw), extra_infos[0] if extra_infos else None)
    reward = _reward(name, settings)
    scores = reward.score(list(solution_strs), **_columns(reward, ground_truths, extra_infos), data_source=list(data_sources))
    dicts = [_to_dict(s) for s in scores]
    keys = sorted({k for d in dicts for k in d})
    return [_to_dict(s, keys) for s in scores]


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
    return _uniform(reward, _to_dict(score))


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

__all__ = ["caprl_qa", "compute_score", "compute_score_async", "compute_score_batch", "hfrrf", "rubicap_rubric"]
