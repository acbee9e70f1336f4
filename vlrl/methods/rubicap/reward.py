"""``rubicap_rubric``: reward a caption by a judge's verdicts on its image's weighted rubrics (RubiCap).

Each image carries a rubric set (the ``rubrics`` dataset column, written by ``vlrl data rubrics``):
binary criteria weighted 3 / 2 / 1 for critical / important / minor, plus *pitfalls* (negative
weight: criteria that describe a mistake, such as an object the student hallucinated). A light judge
reads the rollout caption and the rubrics and says, per rubric, whether the caption meets it. With
``P = Σ w`` over positive rubrics the reward is::

    reward = clip((Σ_{w>0} w·met − Σ_{w<0} |w|·met) / P, −1, 1)

so a caption that meets every positive criterion and commits no pitfall scores 1, and one that
repeats a hallucination loses that pitfall's weight. A set made only of pitfalls scores
``1 − Σ |w|·met / Σ |w|``. Without pitfalls this is RubiCap's weighted pass rate ``Σ w·pass / Σ w``.
The judge never sees the teachers or the student's old caption, only self-contained criteria, which
is what keeps a small in-loop judge reliable.

The judge is hardened against the caption it grades:

* the caption is JSON-escaped (one line, quotes escaped) inside an element whose name carries a
  nonce derived from the caption, so a caption cannot close the block and forge criteria or
  instructions after it;
* the verdict read is the judge's *final* JSON object of the expected shape (see
  :mod:`.verdicts`), so a verdict quoted from the caption loses to the judge's own;
* rubric order is shuffled per call (deterministically from ``seed``, the caption and the vote), so
  no criterion is always first; ``votes: k`` asks k shuffled orders and takes each rubric's majority;
* prompts say truthfully whether the image is shown (``with_image``);
* ``explain`` asks for a one-sentence explanation before each verdict.

Options (a recipe's reward block):

* ``per_rubric`` — one judge call per (caption, rubric) instead of one per caption.
* ``aggregation: implicit`` — Rubrics-as-Rewards' implicit variant: one 0–10 score, normalised.
* ``veto_critical`` — Rubicon's veto: failing a critical rubric (or committing a critical pitfall)
  zeroes the reward.
* ``judges: [spec, ...]`` with ``panel: mean | majority | min`` — a panel of judges. ``mean`` and
  ``min`` combine the judges' rewards; ``majority`` takes each rubric's majority verdict across
  judges. The details carry every judge's value, the share of rubrics they disagreed on
  (``panel_disagreement``) and judges that failed (``panel_failures``; the rest still decide).
* ``on_judge_failure`` — a judge that still answers garbage after ``max_retries`` corrective
  rounds: ``drop`` returns ``None`` and ``zero`` returns 0.0. Either way it is counted and logged.

Verdicts are validated: the answer must hold exactly one verdict per rubric id, no unknown or
duplicate ids. A bad answer goes back to the judge with the error quoted. All requests of a batch go
to the backend in one ``chat()`` call per retry round, and identical requests are sent once.

Inputs that cannot be judged are handled before any call: a missing, empty or malformed rubric set
scores ``None`` (nothing to reward against); an empty caption scores 0.0 without calling the judge.
Nothing here raises inside a training step.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections import Counter
from typing import Any

from vlrl.core.backends import Backend, ChatRequest, SamplingParams, load_backend, parse_spec
from vlrl.judge.fence import fence_caption
from vlrl.methods.rubicap.verdicts import (
    majority,
    parse_score,
    parse_single_verdict,
    parse_verdicts,
    parse_verdicts_text,
    score_schema,
    single_verdict_schema,
    verdicts_schema,
)
from vlrl.rewards import register_reward
from vlrl.rewards.base import BACKEND_FAILED, Reward, Score

logger = logging.getLogger(__name__)

PANEL = ("mean", "majority", "min")
BUILTIN_PROMPTS = ("rubric_judge.jinja", "rubric_judge_single.jinja", "rubric_judge_implicit.jinja")
"""Explicit, per-rubric and implicit prompts; their answers are sent with a JSON schema (verdicts.py)."""

__all__ = ["RubricJudgeReward", "caption_fence", "parse_score", "parse_single_verdict", "parse_verdicts", "rubric_value"]


def caption_fence(caption: str) -> dict[str, str]:
    """Template variables that put ``caption`` where it cannot forge prompt structure (see
    :func:`vlrl.judge.fence.fence_caption`)."""
    return fence_caption(caption)


def rubric_value(rset: list[Any], met: dict[str, bool]) -> tuple[float, dict[str, Any]]:
    """The reward of one caption from per-rubric verdicts (formula in the module docstring)."""
    pos = [r for r in rset if r.weight > 0]
    neg = [r for r in rset if r.weight < 0]
    p_total = sum(r.weight for r in pos)
    n_total = sum(-r.weight for r in neg)
    gain = sum(r.weight for r in pos if met[r.id])
    penalty = sum(-r.weight for r in neg if met[r.id])
    value = (gain - penalty) / p_total if p_total else 1.0 - penalty / n_total
    value = max(-1.0, min(1.0, value))
    details: dict[str, Any] = {}
    if pos:
        details["pass_rate"] = sum(met[r.id] for r in pos) / len(pos)
        details["weighted_pass_rate"] = gain / p_total
    for sev in ("critical", "important", "minor"):
        mine = [met[r.id] for r in pos if r.severity == sev]
        if mine:
            details[f"pass_rate_{sev}"] = sum(mine) / len(mine)
    if neg:
        details["pitfalls"] = len(neg)
        details["pitfall_hits"] = sum(met[r.id] for r in neg)
        details["pitfall_penalty"] = penalty / p_total if p_total else penalty / n_total
    return value, details


@register_reward("rubicap_rubric")
class RubricJudgeReward(Reward):
    """Weighted binary rubric reward judged by an LLM (or a panel). Settings are keyword arguments."""

    name = "rubicap_rubric"
    required_columns = ("rubrics",)

    def __init__(
        self,
        judge: str | Backend | list[str | Backend] | None = None,
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
        judges: list[str | Backend] | None = None,
        panel: str = "mean",
        votes: int = 1,
        shuffle: bool = True,
        explain: bool = False,
        seed: int = 0,
    ) -> None:
        if aggregation not in ("explicit", "implicit"):
            raise ValueError(f"rubicap_rubric: aggregation must be 'explicit' or 'implicit', not {aggregation!r}")
        if on_judge_failure not in ("drop", "zero"):
            raise ValueError(f"rubicap_rubric: on_judge_failure must be 'drop' or 'zero', not {on_judge_failure!r}")
        if aggregation == "implicit" and (per_rubric or veto_critical):
            raise ValueError(
                "rubicap_rubric: implicit aggregation gives one score, so per_rubric and veto_critical do not apply"
            )
        if panel not in PANEL:
            raise ValueError(f"rubicap_rubric: panel must be one of {', '.join(PANEL)}, not {panel!r}")
        if aggregation == "implicit" and panel == "majority":
            raise ValueError("rubicap_rubric: a majority panel needs per-rubric verdicts; use mean or min with implicit")
        if int(votes) < 1:
            raise ValueError(f"rubicap_rubric: votes must be at least 1, not {votes}")
        specs = list(judges or []) + ([] if judge is None else list(judge) if isinstance(judge, (list, tuple)) else [judge])
        if not specs:
            raise ValueError("rubicap_rubric: give a judge (or judges: [...] for a panel)")
        for spec in specs:
            if isinstance(spec, str):
                parse_spec(spec)  # a malformed spec fails when the reward is built, not per row
        self.judges = specs
        self.judge = specs[0]
        self.cache = cache
        self.per_rubric = bool(per_rubric)
        self.aggregation = aggregation
        self.veto_critical = bool(veto_critical)
        self.on_judge_failure = on_judge_failure
        self.max_retries = int(max_retries)
        self.temperature = float(temperature)
        self.with_image = bool(with_image)
        self.panel = panel
        self.votes = int(votes)
        self.shuffle = bool(shuffle)
        self.explain = bool(explain)
        self.seed = int(seed)
        if prompt is None:
            prompt = {"implicit": BUILTIN_PROMPTS[2]}.get(aggregation, BUILTIN_PROMPTS[1 if per_rubric else 0])
        self.prompt = prompt
        default_tokens = (1024 if self._mode == "explicit" else 64) * (3 if self.explain else 1)
        self.max_tokens = int(max_tokens) if max_tokens else default_tokens
        self.counts: Counter[str] = Counter()
        """Running totals over the reward's life: judged, judge_failures, empty_rubrics, ..."""
        self._backends: list[Backend | None] = [None] * len(specs)
        self.keep_verdicts = False

    @property
    def _mode(self) -> str:
        return "implicit" if self.aggregation == "implicit" else ("per_rubric" if self.per_rubric else "explicit")

    def _backend_at(self, k: int) -> Backend:
        if self._backends[k] is None:
            self._backends[k] = load_backend(self.judges[k], cache=self.cache)
        return self._backends[k]

    @property
    def backend(self) -> Backend:
        """The (first) judge, built on first use."""
        return self._backend_at(0)

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
        return Score(value, {"judge_failures": 1, BACKEND_FAILED: 1, "reason": reason, **details})

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
            per_judge = [self._judge_with(k, completions, jobs, image_col) for k in range(len(self.judges))]
            for j, (i, rset) in enumerate(jobs):
                scores[i] = self._panel(rset, [pj[j] for pj in per_judge])
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
        from vlrl.core.images import image_part

        return image_part(value) if self.with_image else None

    def _order(self, rset: list[Any], caption: str, vote: int) -> list[Any]:
        """Rubrics in a per-call order: deterministic from (seed, caption, vote), so calls cache."""
        if not self.shuffle or len(rset) < 2:
            return list(rset)
        key = hashlib.sha256(f"{self.seed}\x00{vote}\x00{caption}".encode()).hexdigest()
        order = list(rset)
        random.Random(key).shuffle(order)
        return order

    def request_text(self, caption: str, rubric: Any, with_image: bool = False) -> str:
        """The user message of one per-rubric judge request, exactly as :meth:`score` sends it.

        Public so that code training a judge for this reward (the shapes demo's tiny rubric judge)
        renders its training prompts with the very code the reward uses: the two cannot disagree.
        ``rubric`` is one item of :func:`~vlrl.methods.rubicap.schema.parse_rubric_set`.
        """
        from vlrl.core.prompts import render

        if self._mode != "per_rubric":
            raise ValueError("rubicap_rubric: request_text is the per_rubric request; build the reward with per_rubric=True")
        return render(self.prompt, rubric=rubric, **caption_fence(caption), with_image=with_image, explain=self.explain)

    def _judge_with(
        self, k: int, completions: list[str], jobs: list[tuple[int, list[Any]]], image_col: list[Any]
    ) -> list[tuple[Score, dict[str, bool] | None]]:
        """Judge ``k`` on every job: per job its Score and (explicit modes) the majority verdicts."""
        from vlrl.core.prompts import render
        from vlrl.judge.structured import chat_structured

        sampling = SamplingParams(max_tokens=self.max_tokens, temperature=self.temperature)
        # the built-in prompts' answers go out as structured output; a custom prompt may ask for another layout
        builtin = self.prompt in BUILTIN_PROMPTS
        unique: dict[str, int] = {}
        requests: list[ChatRequest] = []
        parsers: list[Any] = []
        owners: list[list[list[int]]] = []  # per job, per vote: indices into requests
        for j, (i, rset) in enumerate(jobs):
            caption = completions[i]
            try:
                img = self._image_part(image_col[i])
            except Exception as e:  # noqa: BLE001 - an unreadable image: judge text-only, say so
                logger.warning("rubicap_rubric: image of sample %d unreadable (%s); judging text only", i, e)
                img = None
            fence = caption_fence(caption)
            per_vote = []
            for v in range(self.votes):
                units = [(r,) for r in rset] if self._mode == "per_rubric" else [tuple(self._order(rset, caption, v))]
                mine = []
                for unit in units:
                    if self._mode == "per_rubric":
                        text = self.request_text(caption, unit[0], with_image=img is not None)
                        parse, schema = parse_single_verdict, single_verdict_schema(self.explain)
                    else:
                        common = {**fence, "with_image": img is not None, "explain": self.explain}
                        text = render(self.prompt, rubrics=list(unit), **common)
                        ids = [r.id for r in unit]
                        parse = parse_score if self._mode == "implicit" else (lambda t, ids=ids: parse_verdicts_text(t, ids))
                        schema = score_schema(self.explain) if self._mode == "implicit" else verdicts_schema(ids, self.explain)
                    src = image_col[i] if isinstance(image_col[i], str) else id(image_col[i])
                    # votes of per-rubric / implicit prompts repeat the text: the vote index keeps them apart
                    key = f"{src if img else ''}\x00{v if self.temperature > 0 else ''}\x00{text}"
                    if key not in unique:
                        content: Any = [img, {"type": "text", "text": text}] if img else text
                        unique[key] = len(requests)
                        requests.append(ChatRequest([{"role": "user", "content": content}], sampling,
                                                    id=f"sample{i}/{j}/v{v}", json_schema=schema if builtin else None))
                        parsers.append(parse)
                    mine.append(unique[key])
                per_vote.append(mine)
            owners.append(per_vote)
        results = chat_structured(
            self._backend_at(k), requests, lambda obj, q: parsers[q](obj), max_retries=self.max_retries, raw_text=True,
            reject_truncated=True,
        )
        return [self._aggregate(rset, [[results[q] for q in vote] for vote in owners[j]]) for j, (_, rset) in enumerate(jobs)]

    def _aggregate(self, rset: list[Any], votes: list[list[Any]]) -> tuple[Score, dict[str, bool] | None]:
        flat = [r for vote in votes for r in vote]
        retries = sum(max(r.attempts - 1, 0) for r in flat)
        bad = next((r for r in flat if not r.ok), None)
        if bad is not None:
            self.counts["judge_failures"] += 1
            return self._failure(f"judge: {bad.error}", n_rubrics=len(rset), judge_retries=retries), None
        details: dict[str, Any] = {"n_rubrics": len(rset), "judge_failures": 0, "judge_retries": retries}
        if self._mode == "implicit":
            value = sum(float(vote[0].value) for vote in votes) / len(votes)
            details["implicit_score"] = value
            return Score(value, details), None
        if self._mode == "explicit":
            ballots = [vote[0].value for vote in votes]
        else:
            ballots = [{r.id: res.value for r, res in zip(rset, vote, strict=True)} for vote in votes]
        met = {r.id: majority([b[r.id] for b in ballots]) for r in rset}
        if len(ballots) > 1:
            details["vote_disagreement"] = sum(len({b[r.id] for b in ballots}) > 1 for r in rset) / len(rset)
        return self._from_verdicts(rset, met, details), met

    def _from_verdicts(self, rset: list[Any], met: dict[str, bool], details: dict[str, Any]) -> Score:
        value, more = rubric_value(rset, met)
        details.update(more)
        if self.keep_verdicts:  # per-rubric verdicts for audits (the discrimination check), not for logs
            details["verdicts"] = dict(met)
        if self.veto_critical:
            vetoed = any(r.severity == "critical" and (met[r.id] == (r.weight < 0)) for r in rset)
            details["vetoed"] = int(vetoed)
            if vetoed:
                self.counts["vetoed"] += 1
                value = min(value, 0.0)
        return Score(value, details)

    def _panel(self, rset: list[Any], outcomes: list[tuple[Score, dict[str, bool] | None]]) -> Score:
        """Combine the judges' outcomes for one caption (a single judge passes through)."""
        if len(outcomes) == 1:
            return outcomes[0][0]
        ok = [(s, m) for s, m in outcomes if not s.details.get("judge_failures")]
        values = [s.value for s, _ in outcomes]
        if not ok:
            return self._failure(outcomes[0][0].details.get("reason", "every judge failed"), panel_values=values)
        if self.panel == "majority":
            met = {r.id: majority([m[r.id] for _, m in ok]) for r in rset}
            score = self._from_verdicts(rset, met, {"n_rubrics": len(rset), "judge_failures": 0})
        else:
            pick = min if self.panel == "min" else (lambda xs: sum(xs) / len(xs))
            value = pick([s.value for s, _ in ok])
            score = Score(value, {**ok[0][0].details})
        score.details["panel_values"] = values
        score.details["panel_failures"] = len(outcomes) - len(ok)
        verdict_sets = [m for _, m in ok if m is not None]
        if len(verdict_sets) > 1:
            score.details["panel_disagreement"] = (
                sum(len({m[r.id] for m in verdict_sets}) > 1 for r in rset) / len(rset)
            )
        else:
            score.details["panel_disagreement"] = (max(s.value for s, _ in ok) - min(s.value for s, _ in ok))
        return score
