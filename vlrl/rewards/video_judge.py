"""``video_judge``: CapRL++'s VLM-judge mode, a video judge scoring four dimensions of a caption.

CapRL++ can score video captions with a VLM judge instead of (or beside) QA: the judge watches the
video, reads the caption and rates **factuality**, **temporal alignment**, **coverage** and
**hallucination** (higher is better: fewer inventions), which are combined with the weights
0.30 / 0.25 / 0.25 / 0.20. Here each dimension is an integer on ``scale`` (0–10 by default), and the
reward is ``Σ w_d · (s_d - low) / (high - low) / Σ w_d`` in [0, 1]; every dimension is logged.

It is :class:`~vlrl.rewards.likert.LikertJudgeReward` with another verdict: the same judge seam
(:func:`vlrl.judge.chat_structured`: batched, a malformed or out-of-range answer sent back with the
reason, a truncated one rejected), the same fenced caption, identical (video, caption) pairs judged
once, and ``on_judge_failure`` (``drop`` → ``None``, never a silent 0.0). What differs is what the
judge is shown, the row's video (the ``videos``/``video``/``video_path`` column, decoded by Qwen's
video rules in :func:`vlrl.core.video.load_video_value`), and the structured answer it must give.

Settings (a recipe's reward block)::

    - name: video_judge
      settings:
        judge: openai:http://127.0.0.1:8002/v1@Qwen2.5-VL-72B-Instruct
        weights: {factuality: 0.30, temporal_alignment: 0.25, coverage: 0.25, hallucination: 0.20}
        scale: [0, 10]
        prompt: video_judge        # template name or path: rewards/prompts/video_judge.jinja

A row whose video cannot be decoded is that row's failure (with the reason), never a blind verdict.
A judge known to be biased (to length, to style) is as hackable here as for images: pair it with
guards (``docs/guards.md``) when training on it.
"""

from __future__ import annotations

from typing import Any

from vlrl.core.backends import Backend
from vlrl.judge.structured import InvalidOutput, extract_final_json
from vlrl.rewards import register_reward
from vlrl.rewards.likert import LikertJudgeReward

DIMENSIONS = {"factuality": 0.30, "temporal_alignment": 0.25, "coverage": 0.25, "hallucination": 0.20}
"""CapRL++'s judge dimensions and their weights."""


def parse_video_verdict(text: str, low: int = 0, high: int = 10) -> dict[str, int]:
    """The final JSON object in ``text`` holding an integer in ``[low, high]`` for every dimension;
    raises ValueError naming what is missing or out of range (never rounded, clipped or defaulted)."""

    def accept(obj: Any) -> dict[str, int]:
        if not isinstance(obj, dict) or not all(k in obj for k in DIMENSIONS):
            raise ValueError("answer with {" + ", ".join(f'"{k}": <integer from {low} to {high}>' for k in DIMENSIONS) + "}")
        out = {}
        for k in DIMENSIONS:
            v = obj[k]
            if isinstance(v, str) and v.strip().lstrip("-").isdigit():
                v = int(v.strip())
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v):
                raise ValueError(f"{k} must be an integer from {low} to {high}, not {v!r}")
            if not low <= int(v) <= high:
                raise ValueError(f"{k} {int(v)} is outside {low}..{high}")
            out[k] = int(v)
        return out

    try:
        return extract_final_json(text, accept)
    except InvalidOutput as e:
        raise ValueError(str(e)) from None


@register_reward("video_judge")
class VideoJudgeReward(LikertJudgeReward):
    name = "video_judge"

    def __init__(self, judge: str | Backend, prompt: str = "video_judge", weights: dict[str, float] | None = None,
                 scale: tuple[int, int] | list[int] = (0, 10), max_tokens: int = 128, with_video: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(judge, prompt=prompt, with_image=with_video, scale=scale, max_tokens=max_tokens, **kwargs)
        weights = {**DIMENSIONS, **(weights or {})}
        unknown = set(weights) - set(DIMENSIONS)
        if unknown or any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
            raise ValueError(f"video_judge: weights are non-negative numbers for {', '.join(DIMENSIONS)}"
                             f"{f' (unknown: {sorted(unknown)})' if unknown else ''}")
        self.weights = {k: float(weights[k]) for k in DIMENSIONS}

    def _media_column(self, image: Any = None, images: Any = None, **columns: Any) -> Any:
        from vlrl.core.sources.columns import VIDEO_COLUMNS

        return next((columns[c] for c in VIDEO_COLUMNS if columns.get(c) is not None), None)

    def _image_part(self, value: Any) -> dict[str, Any] | None:
        """The row's video as the judge's video part; a row that names none, or one that cannot be
        decoded, is refused (``ValueError``: that row's failure), never judged blind."""
        from vlrl.core.video import load_video_value, media_part, video_value

        if not self.with_image:
            return None
        if video_value(value) is None:
            raise ValueError("the row has no video (videos/video/video_path column)")
        return media_part(load_video_value(value, record="video_judge"))

    def _score(self, completions: list[str], image_col: list[Any]) -> list[Any]:
        """Each distinct video is decoded once (a GRPO group shares its row's); a row whose video
        fails to decode fails alone, with the reason, and the rest are judged as one batch."""
        from vlrl.core.images import ImageLoadError
        from vlrl.rewards.base import Score

        bad: dict[int, str] = {}
        decoded: dict[str, Any] = {}
        col = list(image_col)
        if self.with_image:
            for i, value in enumerate(image_col):
                if not (completions[i] or "").strip():
                    continue  # an empty caption scores 0.0 without a call
                key = repr(value) if isinstance(value, (str, list, tuple)) else str(id(value))
                try:
                    if key not in decoded:
                        decoded[key] = self._image_part(value)["video"]
                    col[i] = decoded[key]
                except (ImageLoadError, ValueError) as e:
                    bad[i] = getattr(e, "reason", None) or str(e)
        keep = [i for i in range(len(completions)) if i not in bad]
        scored = super()._score([completions[i] for i in keep], [col[i] for i in keep]) if keep else []
        out: list[Any] = [None] * len(completions)
        for i, sc in zip(keep, scored, strict=True):
            out[i] = sc
        for i, reason in bad.items():
            self.counts["video_failures"] += 1
            out[i] = Score(None, {"video_failures": 1, "reason": f"video: {reason}"})
        for clip in decoded.values():
            clip.close()
        return out

    def _parse(self, text: str) -> dict[str, int]:
        return parse_video_verdict(text, self.low, self.high)

    def _value(self, verdict: dict[str, int]) -> tuple[float, dict[str, float]]:
        span = self.high - self.low
        total = sum(self.weights.values())
        value = sum(self.weights[k] * (verdict[k] - self.low) / span for k in DIMENSIONS) / total
        return value, {k: float(v) for k, v in verdict.items()}
