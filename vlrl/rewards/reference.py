"""``rouge_l``: reward a completion by its ROUGE-L overlap with a reference text from the dataset.

Reference overlap is the oldest caption reward (and the baseline RubiCap compares rubrics against):
the longest common subsequence of words between the completion and a reference caption, as the
F-measure (default), recall or precision. It needs no model, so it is cheap and cannot be
prompt-injected, but it pays for *wording* rather than truth: a caption that copies the reference's
phrasing with a wrong colour keeps most of its score, and a correct caption in other words loses.

Scoring is Google's ``rouge-score`` package (the reference implementation of ROUGE-1.5.5's
tokenisation: lower-cased, non-alphanumerics dropped), not a hand-written LCS.

Settings (a recipe's reward block)::

    - name: rouge_l
      settings:
        reference_column: caption_full   # dataset column holding the reference (default "reference")
        measure: f                        # f | recall | precision
        stemmer: false                    # Porter stemming before matching

The column may hold one string or a list of strings (several references: the best one counts).
A row without a usable reference scores ``None`` (nothing to compare against) with the reason in its
details; an empty completion scores 0.0.
"""

from __future__ import annotations

import logging
from typing import Any

from vlrl.rewards import register_reward
from vlrl.rewards.base import Reward, Score

logger = logging.getLogger(__name__)

MEASURES = {"f": "fmeasure", "recall": "recall", "precision": "precision"}


@register_reward("rouge_l")
class RougeLReward(Reward):
    name = "rouge_l"
    required_columns: tuple[str, ...] = ("reference",)

    def __init__(self, reference_column: str = "reference", measure: str = "f", stemmer: bool = False) -> None:
        if measure not in MEASURES:
            raise ValueError(f"rouge_l: measure must be one of {', '.join(MEASURES)}, not {measure!r}")
        if not reference_column or not isinstance(reference_column, str):
            raise ValueError("rouge_l: reference_column must name a dataset column")
        from rouge_score import rouge_scorer

        self.reference_column = reference_column
        self.required_columns = (reference_column,)
        self.measure = measure
        self._scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=bool(stemmer))

    def score(self, completions: list[str], **columns: Any) -> list[Score]:
        refs = columns.get(self.reference_column)
        if refs is None:
            logger.error("rouge_l: no %r column in the batch", self.reference_column)
            return [Score(None, {"reason": f"no {self.reference_column!r} column"}) for _ in completions]
        refs = list(refs)
        if len(refs) != len(completions):
            logger.error("rouge_l: %d completions but %d references", len(completions), len(refs))
            return [Score(None, {"reason": "reference column length mismatch"}) for _ in completions]
        return [self._one(c, r) for c, r in zip(completions, refs, strict=True)]

    def _one(self, completion: str, ref: Any) -> Score:
        options = [ref] if isinstance(ref, str) else list(ref) if isinstance(ref, (list, tuple)) else []
        options = [r for r in options if isinstance(r, str) and r.strip()]
        if not options:
            return Score(None, {"reason": f"no usable reference in {self.reference_column!r}", "no_reference": 1})
        if not (completion or "").strip():
            return Score(0.0, {"empty_completion": 1})
        best = max((self._scorer.score(r, completion)["rougeL"] for r in options),
                   key=lambda s: getattr(s, MEASURES[self.measure]))
        return Score(float(getattr(best, MEASURES[self.measure])),
                     {"precision": float(best.precision), "recall": float(best.recall)})
