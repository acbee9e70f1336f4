"""``rubicap_rubric``: reward a caption by a judge's verdicts on its image's weighted rubrics (RubiCap).

Each image carries a rubric set (the ``rubrics`` dataset column, written by ``vlrl data rubrics``):
binary criteria weighted 3 / 2 / 1 for critical / important / minor. A light judge reads the rollout
caption and the rubrics and says pass or fail per rubric; the reward is the weighted pass rate
``Σ w·pass / Σ w``. The judge never sees the teachers or the student's old caption, only
self-contained criteria, which is what keeps a small in-loop judge reliable.

Options (a recipe's reward block):

* ``per_rubric`` — one judge call per (caption, rubric) instead of one per caption: more calls, but
  each decision is isolated (no anchoring between rubrics, no id bookkeeping for the judge).
* ``aggregation: implicit`` — Rubrics-as-Rewards' implicit variant: the judge sees all rubrics with
  their weights and returns one 0–10 score, normalised to [0, 1]. No per-rubric verdicts, so no
  severity pass rates and no veto.
* ``veto_critical`` — Rubicon's veto: failing any critical rubric zeroes the reward.
* ``on_judge_failure`` — a judge that still answers garbage after ``max_retries`` corrective rounds:
  ``drop`` returns ``None`` (the sample does not steer training) and ``zero`` returns 0.0. Either way
  it is counted (``judge_failures``) and logged.

Verdicts are validated: the answer must hold exactly one verdict per rubric id, no unknown or
duplicate ids. A bad answer goes back to the judge with the error quoted. All requests of a batch go
to the backend in one ``chat()`` call per retry round, and identical requests (GRPO groups often
repeat a caption) are sent once.

Inputs that cannot be judged are handled before any call: a missing, empty or malformed rubric set
scores ``None`` (nothing to reward against); an empty caption scores 0.0 without calling the judge.
Nothing here raises inside a training step.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from typing import Any

from vlrl.core.backends import Backend, ChatRequest, SamplingParams, load_backend, parse_spec
from vlrl.rewards import register_reward
from vlrl.rewards.base import Reward, Score

logger = logging.getLogger(__name__)

_TRUE = {"pass", "passed", "yes", "true", "1", "met", "y"}
_FALSE = {"fail", "failed", "no", "false", "0", "not met", "n"}
_LEADING_WORD = re.compile(r"^\W*([A-Za-z]+)")
_NUMBER = re.compile(r"^\W*(\d+(?:\.\d+)?)\s*(?:/\s*10)?")


def _as_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in _TRUE | _FALSE:
        return v.strip().lower() in _TRUE
    raise ValueError(f"verdict {v!r} is not true/false")


def parse_verdicts(obj: Any, ids: list[str]) -> dict[str, bool]:
    """``{"verdicts": [{"id", "pass"}]}`` (or a bare list, or ``{id: bool}``) → {id: passed}.

    Raises ``ValueError`` worded for the judge when ids or the count are wrong.
    """
    if isinstance(obj, dict) and "verdicts" in obj:
        obj = obj["verdicts"]
    pairs: list[tuple[str, Any]] = []
    if isinstance(obj, list):
        for v in obj:
            if not isinstance(v, dict) or "id" not in v:
                raise ValueError('each verdict must be an object like {"id": "r1", "pass": true}')
            val = next((v[k] for k in ("pass", "passed", "verdict", "met", "result") if k in v), None)
            if val is None:
                raise ValueError(f'verdict for id {v["id"]!r} has no "pass" field')
            pairs.append((str(v["id"]), val))
    elif isinstance(obj, dict):
        pairs = [(str(k), v) for k, v in obj.items()]
    else:
        raise ValueError('the answer must be {"verdicts": [{"id": ..., "pass": true|false}, ...]}')
    got = [k for k, _ in pairs]
    dup = sorted(k for k, c in Counter(got).items() if c > 1)
    missing = [i for i in ids if i not in got]
    unknown = [k for k in got if k not in ids]
    if dup or missing or unknown or len(got) != len(ids):
        parts = [f"expected exactly {len(ids)} verdicts with ids {ids}, got {len(got)}"]
        if missing:
            parts.append(f"missing {missing}")
        if unknown:
            parts.append(f"unknown {unknown}")
        if dup:
            parts.append(f"duplicated {dup}")
        raise ValueError("; ".join(parts))
    return {k: _as_bool(v) for k, v in pairs}


def parse_single_verdict(text: str) -> bool:
    """``{"pass": true}``, or an answer that starts with PASS/FAIL/YES/NO."""
    from vlrl.judge import json_field

    verdict = json_field(text, "pass", "passed", "verdict", "met", "result")
    if verdict is not None:
        return _as_bool(verdict)
    m = _LEADING_WORD.match(text or "")
    if m and m.group(1).lower() in _TRUE | _FALSE:
        return m.group(1).lower() in _TRUE
    raise ValueError('answer with {"pass": true} or {"pass": false}')


def parse_score(text: str, scale: float = 10.0) -> float:
    """``{"score": 7}`` (or a leading number such as ``7/10``) → 0.7. Out of range is an error."""
    from vlrl.judge import json_field

    value = json_field(text, "score", "rating")
    if value is None:
        m = _NUMBER.match(text or "")
        value = m.group(1) if m else None
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError('answer with {"score": <number from 0 to 10>}') from None
    if not 0 <= x <= scale:
        raise ValueError(f"score {x} is outside 0..{scale:g}")
    return x / scale


@register_reward("rubicap_rubric")
class RubricJudgeReward(Reward):
    """Weighted binary rubric reward judged by an LLM. Settings are keyword arguments."""

    name = "rubicap_rubric"
    required_columns = ("rubrics",)

    def __init__(
        self,
        judge: str | Backend,
        cache: str | None = None,
        per_rubric: bool = False,
        aggregation: str = "explicit",
        veto_critical: bool = False,
        on_judge_failure: str = "drop",
        max_retries: int = 2,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        with_image: bool = False,
        prompt: str | None = None,
    ) -> None:
        if aggregation not in ("explicit", "implicit"):
            raise ValueError(f"rubicap_rubric: aggregation must be 'explicit' or 'implicit', not {aggregation!r}")
        if on_judge_failure not in ("drop", "zero"):
            raise ValueError(f"rubicap_rubric: on_judge_failure must be 'drop' or 'zero', not {on_judge_failure!r}")
        if aggregation == "implicit" and (per_rubric or veto_critical):
            raise ValueError(
                "rubicap_rubric: implicit aggregation gives one score, so per_rubric and veto_critical do not apply"
            )
        if isinstance(judge, str):
            parse_spec(judge)  # a malformed spec fails when the reward is built, not per row
        self.judge = judge
        self.cache = cache
        self.per_rubric = bool(per_rubric)
        self.aggregation = aggregation
        self.veto_critical = bool(veto_critical)
        self.on_judge_failure = on_judge_failure
        self.max_retries = int(max_retries)
        self.temperature = float(temperature)
        self.with_image = bool(with_image)
        if prompt is None:
            prompt = {"implicit": "rubric_judge_implicit.jinja"}.get(
                aggregation, "rubric_judge_single.jinja" if per_rubric else "rubric_judge.jinja"
            )
        self.prompt = prompt
        self.max_tokens = int(max_tokens) if max_tokens else (1024 if self._mode == "explicit" else 64)
        self.counts: Counter[str] = Counter()
        """Running totals over the reward's life: judged, judge_failures, empty_rubrics, ..."""
        self._backend: Backend | None = None

    @property
    def _mode(self) -> str:
        return "implicit" if self.aggregation == "implicit" else ("per_rubric" if self.per_rubric else "explicit")

    @property
    def backend(self) -> Backend:
        """The judge, built on first use."""
        if self._backend is None:
            self._backend = load_backend(self.judge, cache=self.cache)
        return self._backend

    # -- scoring -----------------------------------------------------------------------------------
    def score(
        self, completions: list[str], rubrics: Any = None, image: Any = None, images: Any = None, **_: Any
    ) -> list[Score]:
        n = len(completions)
        try:
            rubric_col = list(rubrics) if rubrics is not None else [None] * n
            if len(rubric_col) != n:
                logger.error("rubicap_rubric: %d completions but %d rubric sets", n, len(rubric_col))
                return [Score(None, {"reason": "rubrics column length mismatch"}) for _ in completions]
            image_col = image if image is not None else images
            return self._score(completions, rubric_col, list(image_col) if image_col is not None else [None] * n)
        except Exception as e:  # noqa: BLE001 - a training step must never die in a reward
            logger.exception("rubicap_rubric: unexpected error, applying on_judge_failure=%s", self.on_judge_failure)
            self.counts["judge_failures"] += n
            return [self._failure(f"internal error: {type(e).__name__}: {e}") for _ in completions]

    def _failure(self, reason: str, **details: Any) -> Score:
        value = None if self.on_judge_failure == "drop" else 0.0
        return Score(value, {"judge_failures": 1, "reason": reason, **details})

    def _score(self, completions: list[str], rubric_col: list[Any], image_col: list[Any]) -> list[Score]:
        from vlrl.methods.rubicap.schema import parse_rubric_set

        scores: list[Score | None] = [None] * len(completions)
        jobs: list[tuple[int, list[Any]]] = []
        for i, (caption, raw) in enumerate(zip(completions, rubric_col, strict=True)):
            try:
                rset = parse_rubric_set(raw)
            except ValueError as e:
                self.counts["malformed_rubrics"] += 1
                scores[i] = Score(None, {"malformed_rubrics": 1, "reason": str(e)})
                continue
            if not rset:
                self.counts["empty_rubrics"] += 1
                scores[i] = Score(None, {"empty_rubrics": 1, "reason": "empty rubric set"})
                continue
            if not (caption or "").strip():
                self.counts["empty_captions"] += 1
                scores[i] = Score(0.0, {"empty_caption": 1, "n_rubrics": len(rset), "judge_failures": 0})
                continue
            jobs.append((i, rset))
        if jobs:
            for (i, _rset), s in zip(jobs, self._judge(completions, jobs, image_col), strict=True):
                scores[i] = s
        self.counts["judged"] += len(jobs)
        fails = sum(1 for s in scores if s is not None and s.details.get("judge_failures"))
        if fails:
            logger.warning(
                "rubicap_rubric: judge failed on %d of %d captions (on_judge_failure=%s)",
                fails,
                len(jobs),
                self.on_judge_failure,
            )
        return [s if s is not None else Score(None) for s in scores]

    def _image_part(self, value: Any) -> dict[str, Any] | None:
        if not self.with_image or value is None:
            return None
        if isinstance(value, list):
            value = value[0] if value else None
        if isinstance(value, dict):
            value = value.get("path") or value.get("bytes")
        if value is None:
            return None
        if isinstance(value, (str, bytes)):
            from vlrl.core.images import load_image

            value = load_image(value)
        return {"type": "image", "image": value}

    def _judge(self, completions: list[str], jobs: list[tuple[int, list[Any]]], image_col: list[Any]) -> list[Score]:
        from vlrl.core.prompts import render
        from vlrl.judge.structured import chat_structured

        sampling = SamplingParams(max_tokens=self.max_tokens, temperature=self.temperature)
        unique: dict[str, int] = {}
        requests: list[ChatRequest] = []
        parsers: list[Any] = []
        owners: list[list[int]] = []  # per job: indices into requests
        for j, (i, rset) in enumerate(jobs):
            caption = completions[i]
            try:
                img = self._image_part(image_col[i])
            except Exception as e:  # noqa: BLE001 - an unreadable image: judge text-only, say so
                logger.warning("rubicap_rubric: image of sample %d unreadable (%s); judging text only", i, e)
                img = None
            units = [(r,) for r in rset] if self._mode == "per_rubric" else [tuple(rset)]
            mine = []
            for unit in units:
                if self._mode == "per_rubric":
                    text = render(self.prompt, caption=caption, rubric=unit[0])
                    parse = _single_parser
                else:
                    text = render(self.prompt, caption=caption, rubrics=list(unit))
                    parse = _implicit_parser if self._mode == "implicit" else _explicit_parser([r.id for r in unit])
                src = image_col[i] if isinstance(image_col[i], str) else id(image_col[i])
                key = f"{src if img else ''}\x00{text}"
                if key not in unique:
                    content: Any = [img, {"type": "text", "text": text}] if img else text
                    unique[key] = len(requests)
                    requests.append(ChatRequest([{"role": "user", "content": content}], sampling, id=f"sample{i}/{j}"))
                    parsers.append(parse)
                mine.append(unique[key])
            owners.append(mine)
        results = chat_structured(
            self.backend, requests, lambda obj, k: parsers[k](obj), max_retries=self.max_retries, raw_text=True
        )
        return [self._aggregate(rset, [results[k] for k in owners[j]]) for j, (_, rset) in enumerate(jobs)]

    def _aggregate(self, rset: list[Any], results: list[Any]) -> Score:
        retries = sum(max(r.attempts - 1, 0) for r in results)
        bad = next((r for r in results if not r.ok), None)
        if bad is not None:
            self.counts["judge_failures"] += 1
            return self._failure(f"judge: {bad.error}", n_rubrics=len(rset), judge_retries=retries)
        details: dict[str, Any] = {"n_rubrics": len(rset), "judge_failures": 0, "judge_retries": retries}
        if self._mode == "implicit":
            value = float(results[0].value)
            details["implicit_score"] = value
            return Score(value, details)
        verdicts = (
            results[0].value
            if self._mode == "explicit"
            else {r.id: res.value for r, res in zip(rset, results, strict=True)}
        )
        total = sum(r.weight for r in rset)
        value = sum(r.weight for r in rset if verdicts[r.id]) / total
        details["pass_rate"] = sum(verdicts[r.id] for r in rset) / len(rset)
        for sev in ("critical", "important", "minor"):
            mine = [verdicts[r.id] for r in rset if r.severity == sev]
            if mine:
                details[f"pass_rate_{sev}"] = sum(mine) / len(mine)
        details["weighted_pass_rate"] = value
        if self.veto_critical:
            vetoed = any(r.severity == "critical" and not verdicts[r.id] for r in rset)
            details["vetoed"] = int(vetoed)
            if vetoed:
                self.counts["vetoed"] += 1
                value = 0.0
        return Score(value, details)


def _explicit_parser(ids: list[str]):
    from vlrl.judge.structured import extract_json

    def parse(text: str) -> dict[str, bool]:
        obj, _ = extract_json(text)
        return parse_verdicts(obj, ids)

    return parse


def _single_parser(text: str) -> bool:
    return parse_single_verdict(text)


def _implicit_parser(text: str) -> float:
    return parse_score(text)
