"""The statistics behind ``vlrl reward smoke``: paired bootstrap intervals and the pass rule.

Comparing two means with no margin and no interval passes on noise: with a random captioner and a
random answerer the real captions "beat" the baselines by luck on most seeds. The smoke check
therefore compares *paired* per-image scores (the same image, the same questions and draws, only
the caption differs), and asks for three things:

* the mean paired difference (real − baseline) is above ``margin``;
* its bootstrap confidence interval excludes 0;
* real captions score above chance, ``1 / (options + 1)`` (the options plus the appended abstain
  option), by ``chance_margin``.

The interval itself is :func:`vlrl.core.stats.paired_bootstrap`, the statistics every report uses.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from vlrl.core.stats import paired_bootstrap


def chance_level(questions: Sequence[Any]) -> float | None:
    """Mean of 1/(options + 1) over every question of every image (the abstain option counts)."""
    from vlrl.methods.caprl.mcq import MCQError, coerce_questions, normalize_mcq

    levels = []
    for qs in questions:
        try:
            items = coerce_questions(qs)
        except MCQError:
            continue
        for q in items:
            try:
                levels.append(1.0 / (len(normalize_mcq(q).options) + 1))
            except MCQError:
                continue
    return statistics.fmean(levels) if levels else None


def verdict(
    real: Sequence[float | None], baselines: dict[str, Sequence[float | None]], chance: float | None, *,
    margin: float = 0.05, chance_margin: float = 0.05, resamples: int = 2000, level: float = 0.95, seed: int = 0,
) -> tuple[dict[str, Any], list[str]]:
    """Per-baseline comparisons and the list of failures (empty: PASS)."""
    comparisons: dict[str, Any] = {}
    failures: list[str] = []
    for name, other in baselines.items():
        c = paired_bootstrap(real, other, resamples=resamples, level=level, seed=seed)
        c["passed"] = c["diff"] is not None and c["diff"] > margin and c["ci_low"] > 0
        comparisons[name] = c
        if c["diff"] is None:
            failures.append(f"real vs {name}: no image was scored in both")
        elif not c["passed"]:
            failures.append(
                f"real captions do not beat {name} captions: mean difference {c['diff']:+.3f} "
                f"(need > {margin:g}), {level:.0%} CI [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}] (must exclude 0)"
            )
    scored = [r for r in real if r is not None]
    real_mean = statistics.fmean(scored) if scored else None
    if chance is not None and (real_mean is None or real_mean <= chance + chance_margin):
        shown = "n/a" if real_mean is None else f"{real_mean:.3f}"
        failures.append(f"real captions score {shown}, not above chance {chance:.3f} + {chance_margin:g}")
    return comparisons, failures


__all__ = ["chance_level", "paired_bootstrap", "verdict"]
