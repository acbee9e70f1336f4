"""Two cheap caption terms from CapRL++, composable with any reward in a recipe.

CapRL++ adds to its QA-utility reward, each with weight 0.2:

* ``caption_length`` (its R_L): 1 for a caption of at most ``full_until`` tokens (2048), falling
  linearly to 0 at ``zero_at`` tokens (3072), 0 beyond. It stops a QA reward, which pays for every
  extra stated fact, from growing captions without bound; it never pays for length.
* ``timestamp_format``: for timestamped (video) captions, how well the ``[mm:ss]`` /
  ``[mm:ss - mm:ss]`` anchors are written: ``0.45·coverage·validity + 0.25·validity +
  0.30·order·validity``, where ``validity`` is the share of bracketed timestamps that are valid
  (seconds 0–59, minutes at most ``max_minute``, an interval's end not before its start),
  ``coverage`` is min(1, valid / ``min_stamps``), and ``order`` is 1 when the valid stamps' start
  times never go back in the order written (else 0). A caption with no valid stamp scores 0. The
  weights and the order term's ``validity`` factor follow CapRL++'s published code.

In a recipe they are reward entries with their own weights, beside the main reward::

    rewards:
      - {name: caprl_qa, weight: 1.0, settings: {...}}
      - {name: caption_length, weight: 0.2}
      - {name: timestamp_format, weight: 0.2}

Lengths are token counts: in training, TRL's ``completion_ids`` (the policy's own tokens, as
CapRL++ counts with the actor's tokenizer); offline (``vlrl reward score``), a ``tokenizer``
setting (a Hugging Face tokenizer folder or name). Without either, a row scores ``None`` with the
reason, never a guess from words.
"""

from __future__ import annotations

import re
from typing import Any

from vlrl.rewards import register_reward
from vlrl.rewards.base import Reward, Score

_STAMP = re.compile(r"\[(\d{1,3}):(\d{2})(?:\s*-\s*(\d{1,3}):(\d{2}))?\]")


def length_term(tokens: int, full_until: int = 2048, zero_at: int = 3072) -> float:
    """R_L: 1 up to ``full_until`` tokens, linear to 0 at ``zero_at``, 0 beyond."""
    if tokens <= full_until:
        return 1.0
    if tokens >= zero_at:
        return 0.0
    return 1.0 - (tokens - full_until) / (zero_at - full_until)


def timestamp_scores(text: str, min_stamps: int = 3, max_minute: int = 599) -> dict[str, float]:
    """``format`` (the term) and its parts ``validity``, ``coverage``, ``order`` and ``stamps``."""
    found = list(_STAMP.finditer(text or ""))
    starts = []
    for m in found:
        mm, ss = int(m.group(1)), int(m.group(2))
        if ss > 59 or mm > max_minute:
            continue
        start = mm * 60 + ss
        if m.group(3) is not None:
            emm, ess = int(m.group(3)), int(m.group(4))
            if ess > 59 or emm > max_minute or emm * 60 + ess < start:
                continue
        starts.append(start)
    if not starts:
        return {"format": 0.0, "validity": 0.0, "coverage": 0.0, "order": 0.0, "stamps": float(len(found))}
    validity = len(starts) / len(found)
    coverage = min(1.0, len(starts) / max(min_stamps, 1))
    order = float(all(a <= b for a, b in zip(starts, starts[1:], strict=False)))
    fmt = 0.45 * coverage * validity + 0.25 * validity + 0.30 * order * validity
    return {"format": min(1.0, fmt), "validity": validity, "coverage": coverage, "order": order,
            "stamps": float(len(found))}


@register_reward("caption_length")
class CaptionLengthReward(Reward):
    """CapRL++'s length term R_L (see the module docstring)."""

    name = "caption_length"

    def __init__(self, full_until: int = 2048, zero_at: int = 3072, tokenizer: str | None = None) -> None:
        if not 0 < int(full_until) < int(zero_at):
            raise ValueError(f"caption_length: need 0 < full_until < zero_at, got {full_until} and {zero_at}")
        self.full_until, self.zero_at = int(full_until), int(zero_at)
        self.tokenizer = tokenizer
        self._tok: Any = None

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs: Any) -> list[float | None]:
        if completion_ids is not None:  # the policy's own token counts
            kwargs.setdefault("completion_lengths", [len(ids) for ids in completion_ids])
        return super().__call__(prompts, completions, completion_ids, **kwargs)

    def _count(self, texts: list[str]) -> list[int] | None:
        if self.tokenizer is None:
            return None
        if self._tok is None:
            from transformers import AutoTokenizer

            self._tok = AutoTokenizer.from_pretrained(self.tokenizer)
        return [len(self._tok(t, add_special_tokens=False)["input_ids"]) for t in texts]

    def score(self, completions: list[str], **columns: Any) -> list[Score]:
        lengths = columns.get("completion_lengths")
        if lengths is None or len(lengths) != len(completions):
            lengths = self._count(completions)
        if lengths is None:
            why = "no token count: caption_length needs TRL's completion_ids or a tokenizer setting"
            return [Score(None, {"reason": why}) for _ in completions]
        return [Score(length_term(int(n), self.full_until, self.zero_at), {"tokens": float(n)}) for n in lengths]


@register_reward("timestamp_format")
class TimestampFormatReward(Reward):
    """CapRL++'s timestamp-format term for timestamped captions (see the module docstring)."""

    name = "timestamp_format"

    def __init__(self, min_stamps: int = 3, max_minute: int = 599) -> None:
        if int(min_stamps) < 1 or int(max_minute) < 0:
            raise ValueError("timestamp_format: min_stamps must be >= 1 and max_minute >= 0")
        self.min_stamps, self.max_minute = int(min_stamps), int(max_minute)

    def score(self, completions: list[str], **columns: Any) -> list[Score]:
        out = []
        for c in completions:
            parts = timestamp_scores(c, self.min_stamps, self.max_minute)
            out.append(Score(parts.pop("format"), parts))
        return out


__all__ = ["CaptionLengthReward", "TimestampFormatReward", "length_term", "timestamp_scores"]
