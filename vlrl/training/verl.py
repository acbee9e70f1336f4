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
* its settings: ``kw["reward_settings"][name]`` (a mapping from reward name to its own settings, for
  runs whose samples pick different rewards through ``extra_info["vlrl_reward"]``: each reward is
  built from its own block, so ``judge`` never reaches hfrrf), else ``kw["settings"]`` (a mapping),
  else ``VLRL_VERL_REWARD_SETTINGS`` (JSON). verl hands ``reward_kwargs`` over as OmegaConf
  containers; they are converted to plain dicts and lists (``OmegaConf.to_container``) first, or
  nested blocks such as ``guards: {policy: veto}`` would be silently ignored;
* columns: ``ground_truth`` becomes the reward's answer column (``answer``), and every key of
  ``extra_info`` (``questions``, ``rubrics``, ``choices``, ...) is passed as a column, as TRL would
  pass dataset columns. A video sample carries ``video_path`` in ``extra_info``, as CapRL++'s reward
  reads it: ``caprl_qa`` then tells its answerer the caption describes a video, and ``video_judge``
  watches that file (``data export --format caprl`` writes it for video rows);
* the call: the reward's own ``__call__``, as TRL makes it, with a ``trainer_state`` whose
  ``global_step`` is the sample's **draw key**: ``extra_info["uid"]``, else ``extra_info["index"]``
  (the row index verl's data preparation writes), else 0. verl scores each sample on its own, so
  this is what keeps CapRL's common random numbers: every rollout of one prompt has the same key,
  so every caption of one image is asked the same questions in the same option orders, as in a TRL
  group. With ``index`` the draws of an image are the same in every epoch; with ``uid`` (a fresh id
  per prompt per step) they are fresh per step, as under TRL.

The dict returned holds ``score`` (a float; a "not applicable" ``None`` becomes 0.0 with
``applicable: 0.0`` so verl's float tensors never see ``None``) and the numeric sub-scores under
**one fixed key schema for every reward** (:func:`detail_keys`: the sub-scores of every built-in
reward, e.g. hfrrf's ``format_ok`` and caprl_qa's ``qa_acc``, every guard's ``guard/*`` and
``guard/<guard>/<family>`` keys, and
``reward_failed``), NaN where a sample has no value. The schema depends on nothing a process or a
sample happens to see, because verl stacks every sample's extra info by the keys of the batch's
first sample, across processes, whichever reward each sample used.

Remote rewards: ``reward: remote`` with ``settings: {url: ...}`` (or the :func:`remote` shortcut) sends
each sample to a ``vlrl serve reward`` service (:mod:`vlrl.rewards.remote`), which batches the
concurrent calls of verl's reward workers; the draw key is sent as the request's ``step``. A
service that fails past the reward's ``failure_budget`` raises out of :func:`compute_score` (and
:func:`compute_score_async`), so verl's step fails and training stops instead of scoring 0.0.

Nothing else escapes :func:`compute_score`: a reward that cannot be built (an unknown name, a setting it
does not take) or that fails on a sample scores 0.0 with ``applicable: 0.0`` and
``reward_failed: 1.0``, and the reason is logged once per reward. Rewards are built once per
process per (name, settings) and reused, so a judge backend is not rebuilt per sample. See
docs/verl.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import threading
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

logger = logging.getLogger(__name__)

_CACHE: dict[str, Any] = {}
_LOCK = threading.Lock()

# Numeric sub-scores each registered reward may report (vlrl.rewards Score.details).
DETAIL_KEYS: dict[str, tuple[str, ...]] = {
    "hfrrf": ("answer_ok", "format_ok", "think_too_short", "truncated"),
    "caprl_qa": ("cannot_answer_rate", "qa_acc"),
    "rubicap_rubric": ("judge_failures", "pass_rate", "pass_rate_critical", "pass_rate_important", "pass_rate_minor",
                       "vetoed", "weighted_pass_rate"),
    "video_judge": ("coverage", "factuality", "hallucination", "judge_failures", "temporal_alignment", "video_failures"),
    "caption_length": ("tokens",),
    "timestamp_format": ("coverage", "order", "stamps", "validity"),
}


def _reward(name: str, settings: Mapping[str, Any]):
    from vlrl.rewards import build_reward

    key = json.dumps([name, settings], sort_keys=True, default=str)
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = build_reward(name, **dict(settings))
        return _CACHE[key]


def detail_keys(reward: Any = None) -> tuple[str, ...]:
    """The one extra-info key set of every sample, whatever its reward (``reward`` is not consulted):
    score, applicable, reward_failed, every built-in reward's sub-scores and every guard's keys."""
    from vlrl.rewards.guards import GUARDS, SUMMARY_KEYS, families_of

    keys = {k for ks in DETAIL_KEYS.values() for k in ks}
    keys |= {f"guard/{n}" for n in GUARDS} | set(SUMMARY_KEYS)
    # every family of the table (guard/<guard>/<family>), and the family of user patterns given as a list
    for n in GUARDS:
        keys |= {f"guard/{n}/{f}" for f in [*([x.name for x in families_of(n)] or [n]), "user"]}
    return ("score", "applicable", "reward_failed", *sorted(keys))


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
    by_reward = kw.pop("reward_settings", None) or {}
    if not isinstance(by_reward, Mapping):
        raise TypeError(f"vlrl verl adapter: reward_settings must map reward names to settings, got {type(by_reward).__name__}")
    settings = by_reward.get(str(name))
    if settings is None:
        settings = kw.pop("settings", None)
    if settings is None:
        env = os.environ.get("VLRL_VERL_REWARD_SETTINGS")
        settings = json.loads(env) if env else {}
    if not isinstance(settings, Mapping):
        raise TypeError(f"vlrl verl adapter: settings must be a mapping, got {type(settings).__name__}")
    return str(name), dict(settings)


def _to_dict(score, keys: Sequence[str], failed: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {k: float("nan") for k in keys}
    out["score"] = 0.0 if score.value is None else float(score.value)
    out["applicable"] = 0.0 if score.value is None else 1.0
    out["reward_failed"] = 1.0 if failed else 0.0
    for k, v in score.details.items():
        if k not in out or k in ("score", "applicable", "reward_failed"):
            continue  # outside the schema: every process must report the same keys
        if isinstance(v, bool):
            v = float(v)
        if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
            out[k] = float(v)
    return out


# keys verl's reward managers add to extra_info themselves: not dataset columns
VERL_EXTRA_KEYS = {"vlrl_reward", "num_turns", "rollout_reward_scores", "tool_extra_fields"}

_WARNED: set[str] = set()


def _warn_once(key: str, message: str, *args: Any) -> None:
    with _LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    logger.warning(message, *args)


class DrawState:
    """What a reward reads of TRL's ``trainer_state``: the step its draws are seeded from.

    A plain class, not a dataclass: verl loads this file by path without registering it in
    ``sys.modules``, where ``dataclasses`` looks the module up."""

    __slots__ = ("global_step",)

    def __init__(self, global_step: int) -> None:
        self.global_step = global_step


def draw_key(extra_info: Mapping[str, Any] | None) -> int:
    """The step CapRL's draws are seeded from under verl: the prompt's ``uid``, else its ``index``, else 0.

    Every rollout of one prompt carries the same uid and index, so its captions share their draws.
    """
    info = extra_info or {}
    for name in ("uid", "index"):
        value = plain(info.get(name))
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int):
            return value
        return zlib.crc32(str(value).encode())
    return 0


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
    """verl's per-sample signature. Never raises: a reward that cannot be built or fails scores 0.0."""
    from vlrl.rewards import Score
    from vlrl.rewards.base import BACKEND_FAILED, last_scores
    from vlrl.rewards.remote import RemoteRewardFailed

    keys = detail_keys()
    extra_info = plain(extra_info)
    if extra_info is not None and not isinstance(extra_info, Mapping):  # a malformed row: its sample fails, not the step
        _warn_once(f"extra_info:{type(extra_info).__name__}", "a %s sample's extra_info is a %s, not a mapping; "
                   "such samples score 0.0 with reward_failed", data_source, type(extra_info).__name__)
        return _to_dict(Score(None, {}), keys, failed=True)
    name = str(kw.get("reward") or (extra_info or {}).get("vlrl_reward") or "?")
    try:
        name, settings = _choose(dict(kw), extra_info)
        reward = _reward(name, settings)
    except Exception as e:  # noqa: BLE001 - verl would kill the whole step; one line says why
        _warn_once(f"build:{name}:{e}", "reward %s could not be built (%s: %s); its samples score 0.0 with reward_failed",
                   name, e.__class__.__name__, e)
        return _to_dict(Score(None, {}), keys, failed=True)
    try:
        # conversational, as vlrl's recipes make TRL pass them (a user function sees what it sees in TRL)
        values = reward(prompts=None, completions=[[{"role": "assistant", "content": solution_str}]], completion_ids=None,
                        trainer_state=DrawState(draw_key(extra_info)),
                        **_columns(reward, [ground_truth], [extra_info]), data_source=[data_source])
        scores = last_scores(reward) or [Score(v) for v in values]
        (score,) = scores
        if score.value is not None:  # what verl's float tensors can hold, checked while a failure is still a sample's
            try:
                value = float(score.value)
            except (TypeError, ValueError):
                raise TypeError(f"the reward returned {score.value!r}, not a number") from None
            if math.isnan(value):  # TRL's "not applicable" (TRL turns None into NaN)
                score = Score(None, score.details)
            elif not math.isfinite(value):
                raise ValueError(f"the reward returned {value!r}, not a finite number")
    except RemoteRewardFailed:
        raise  # the reward service is down past its failure budget: verl's step must fail, not score 0.0
    except Exception as e:  # noqa: BLE001 - verl would kill the whole step for one bad sample
        _warn_once(f"score:{name}:{e.__class__.__name__}", "reward %s failed on a %s sample: %s", name, data_source, e)
        return _to_dict(Score(None, {}), keys, failed=True)
    # a backend that did not answer (a reward service request that failed within its budget, an
    # answerer down) is a failure, not a measured 0.0 nor a "not applicable"
    return _to_dict(score, keys, failed=bool(score.details.get(BACKEND_FAILED)))


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
remote = _named("remote")
video_judge = _named("video_judge")

__all__ = ["DrawState", "caprl_qa", "compute_score", "compute_score_async", "detail_keys", "draw_key", "hfrrf", "plain",
           "remote", "rubicap_rubric", "video_judge"]
