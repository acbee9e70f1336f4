"""``likert_judge``: a holistic judge scores each caption 1–10 with no rubric and no reference.

This is the "LLM-as-a-judge" reward both caption papers argue against: a (vision-)language model
reads the image and the caption and answers one overall quality score, ``{"score": 7}``. CapRL
reports that such rewards are biased (towards length, style, self-praise) and hackable; RubiCap
reports that rubric-guided judging beats them. vlrl has it so those claims can be measured, and
because it is a reasonable first reward when nothing better exists.

The request goes through the judge seam (:func:`vlrl.judge.chat_structured`): one batched
``chat()`` per round, a malformed answer is sent back with the validation error, an answer cut at
the length limit is rejected rather than repaired. The caption is fenced
(:func:`vlrl.judge.fence.fence_caption`) so it cannot close its block and write a verdict; the
verdict read is the judge's *final* JSON object holding ``score``.

Settings (a recipe's reward block)::

    - name: likert_judge
      settings:
        judge: hf:/models/judge?device=cpu   # any backend spec (openai:, hf:, py:)
        prompt: likert_judge                 # template name or path; variables below
        with_image: true                     # attach the image (image/images column)
        scale: [1, 10]                       # the score range the prompt asks for
        max_tokens: 64
        temperature: 0.0
        max_retries: 1
        on_judge_failure: drop               # drop -> None, zero -> 0.0

The reward is ``(score - low) / (high - low)`` in [0, 1]. Templates get ``caption_json``, ``fence``,
``caption``, ``with_image``, ``low`` and ``high``. An empty caption scores 0.0 without a call.
Identical (image, caption) pairs in a batch, common in a GRPO group, are judged once.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any

from vlrl.core.backends import Backend, ChatRequest, SamplingParams, load_backend
from vlrl.judge.fence import fence_caption
from vlrl.judge.structured import InvalidOutput, extract_final_json
from vlrl.rewards import register_reward
from vlrl.rewards.base import BACKEND_FAILED, Reward, Score

logger = logging.getLogger(__name__)


def parse_likert(text: str, low: int = 1, high: int = 10) -> int:
    """The final ``{"score": n}`` in ``text`` as an int in ``[low, high]``; raises ValueError otherwise.

    A fractional or out-of-range score is an error (sent back to the judge), never rounded or
    clipped into range: a judge that answers 11 on a 1–10 scale misread the prompt.
    """

    def accept(obj: Any) -> int:
        if not isinstance(obj, dict) or "score" not in obj:
            raise ValueError(f'answer with {{"score": <integer from {low} to {high}>}}')
        v = obj["score"]
        if isinstance(v, str) and v.strip().lstrip("-").isdigit():
            v = int(v.strip())
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v):
            raise ValueError(f"score must be an integer from {low} to {high}, not {v!r}")
        if not low <= int(v) <= high:
            raise ValueError(f"score {int(v)} is outside {low}..{high}")
        return int(v)

    try:
        return extract_final_json(text, accept)
    except InvalidOutput as e:
        raise ValueError(str(e)) from None


@register_reward("likert_judge")
class LikertJudgeReward(Reward):
    name = "likert_judge"

    def __init__(
        self,
        judge: str | Backend,
        prompt: str = "likert_judge",
        with_image: bool = True,
        scale: tuple[int, int] | list[int] = (1, 10),
        max_tokens: int = 64,
        temperature: float = 0.0,
        max_retries: int = 1,
        on_judge_failure: str = "drop",
        cache: str | None = None,
    ) -> None:
        low, high = (int(x) for x in scale)
        if high <= low:
            raise ValueError(f"likert_judge: scale must be [low, high] with high > low, not {list(scale)}")
        if on_judge_failure not in ("drop", "zero"):
            raise ValueError(f"likert_judge: on_judge_failure must be 'drop' or 'zero', not {on_judge_failure!r}")
        self.judge = judge
        self.prompt = prompt
        self.with_image = bool(with_image)
        self.low, self.high = low, high
        self.sampling = SamplingParams(max_tokens=int(max_tokens), temperature=float(temperature))
        self.max_retries = int(max_retries)
        self.on_judge_failure = on_judge_failure
        self.cache = cache
        self._backend: Backend | None = None
        self.counts: Counter[str] = Counter()

    @property
    def backend(self) -> Backend:
        if isinstance(self.judge, Backend):
            return self.judge
        if self._backend is None:
            self._backend = load_backend(self.judge, cache=self.cache)
        return self._backend

    def _media_column(self, image: Any = None, images: Any = None, **_: Any) -> Any:
        """The dataset column the judge may be shown (subclasses judge other media)."""
        return image if image is not None else images

    def score(self, completions: list[str], image: Any = None, images: Any = None, **columns: Any) -> list[Score]:
        try:
            col = self._media_column(image=image, images=images, **columns)
            col = list(col) if col is not None else [None] * len(completions)
            if len(col) != len(completions):
                return [Score(None, {"reason": "image column length mismatch"}) for _ in completions]
            return self._score(completions, col)
        except Exception as e:  # noqa: BLE001 - a training step must never die in a reward
            logger.exception("%s: unexpected error", self.name)
            self.counts["judge_failures"] += len(completions)
            return [self._failure(f"internal error: {type(e).__name__}: {e}") for _ in completions]

    def _failure(self, reason: str) -> Score:
        return Score(None if self.on_judge_failure == "drop" else 0.0, {"judge_failures": 1, BACKEND_FAILED: 1, "reason": reason})

    def _image_part(self, value: Any) -> dict[str, Any] | None:
        from vlrl.core.images import image_part

        return image_part(value) if self.with_image else None

    def _score(self, completions: list[str], image_col: list[Any]) -> list[Score]:
        from vlrl.core.prompts import render
        from vlrl.judge.structured import chat_structured

        scores: list[Score | None] = [None] * len(completions)
        unique: dict[tuple[Any, str], int] = {}
        requests: list[ChatRequest] = []
        owner: list[int] = [-1] * len(completions)
        for i, caption in enumerate(completions):
            if not (caption or "").strip():
                self.counts["empty_captions"] += 1
                scores[i] = Score(0.0, {"empty_caption": 1, "judge_failures": 0})
                continue
            img = self._image_part(image_col[i])
            text = render(self.prompt, **fence_caption(caption), with_image=img is not None, low=self.low, high=self.high)
            src = image_col[i] if isinstance(image_col[i], str) else repr(image_col[i]) if _paths(image_col[i]) else id(image_col[i])
            key = (src if img else None, text)
            if key not in unique:
                unique[key] = len(requests)
                content: Any = [img, {"type": "text", "text": text}] if img else text
                requests.append(ChatRequest([{"role": "user", "content": content}], self.sampling, id=f"sample{i}"))
            owner[i] = unique[key]
        if requests:
            results = chat_structured(
                self.backend, requests, lambda t, _i: self._parse(t),
                max_retries=self.max_retries, raw_text=True, reject_truncated=True,
            )
            for i, q in enumerate(owner):
                if q < 0:
                    continue
                r = results[q]
                if not r.ok:
                    self.counts["judge_failures"] += 1
                    scores[i] = self._failure(f"judge: {r.error}")
                    continue
                value, details = self._value(r.value)
                scores[i] = Score(value, {**details, "judge_failures": 0, "judge_retries": max(r.attempts - 1, 0)})
            fails = sum(1 for s in scores if s is not None and s.details.get("judge_failures"))
            if fails:
                logger.warning("%s: judge failed on %d of %d captions (on_judge_failure=%s)", self.name, fails,
                               len(completions), self.on_judge_failure)
        self.counts["judged"] += len(requests)
        return [s if s is not None else Score(None) for s in scores]

    def _parse(self, text: str) -> Any:
        """The judge's answer as a verdict (``ValueError`` with what is wrong is sent back to it)."""
        return parse_likert(text, self.low, self.high)

    def _value(self, verdict: Any) -> tuple[float, dict[str, float]]:
        """A verdict as the reward in [0, 1] and the parts logged beside it."""
        return (verdict - self.low) / (self.high - self.low), {"likert": float(verdict)}

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None


def _paths(value: Any) -> bool:
    """A list of paths (a ``videos`` cell): keyed by its text, so a GRPO group's copies share a verdict."""
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, str) for v in value)
