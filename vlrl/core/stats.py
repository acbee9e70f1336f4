"""Small, dependency-free interval estimates and tests for evaluation reports.

Evaluation numbers in vlrl come from a few hundred images at most, so a point estimate alone says
little: a 0.56 win rate over 50 pairs is not distinguishable from a coin. Every report carries an
interval next to its estimate:

* :func:`wilson` — the Wilson score interval for a proportion (well behaved at 0, 1 and small n,
  unlike the normal approximation);
* :func:`sign_test` — the exact two-sided binomial sign test of wins against losses (ties dropped);
* :func:`bootstrap_mean` — a percentile bootstrap interval of a mean, seeded, for quantities that
  are not simple proportions (per-image accuracies, arena scores);
* :func:`paired_bootstrap` — the mean paired difference of two scored lists with that interval
  (the reward smoke check's real-versus-baseline captions);
* :func:`bootstrap_ratio` — a percentile bootstrap interval of a pooled rate ``sum(num) / sum(den)``
  resampling whole clusters (an image and all its questions), for accuracies over questions that
  share an image and so are not independent draws.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from typing import Any


def wilson(successes: float, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """95% (by default) Wilson interval of ``successes / n``; ``None`` when ``n == 0``."""
    if n <= 0:
        return None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def sign_test(wins: int, losses: int) -> float | None:
    """Exact two-sided p-value that wins and losses are equally likely; ``None`` without any."""
    n = wins + losses
    if n == 0:
        return None
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def bootstrap_mean(
    values: Sequence[float], *, resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of ``values`` (seeded: reruns agree)."""
    vals = [float(v) for v in values]
    if not vals:
        return None
    if len(vals) == 1:
        return vals[0], vals[0]
    rng = random.Random(seed)
    n = len(vals)
    means = sorted(statistics.fmean(rng.choices(vals, k=n)) for _ in range(resamples))
    lo = means[int((1 - level) / 2 * (resamples - 1))]
    hi = means[int((1 + level) / 2 * (resamples - 1))]
    return lo, hi


def paired_bootstrap(
    a: Sequence[float | None], b: Sequence[float | None], *, resamples: int = 2000, level: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """Mean of ``a - b`` over the pairs where both are scored (not None), with its
    :func:`bootstrap_mean` interval: ``{"pairs", "diff", "ci_low", "ci_high"}``.

    Pairing (the same image, the same questions, only the caption differs) removes the per-item
    difficulty from the comparison, so a real gap shows with far fewer items than two separate
    means would need."""
    diffs = [x - y for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    if not diffs:
        return {"pairs": 0, "diff": None, "ci_low": None, "ci_high": None}
    lo, hi = bootstrap_mean(diffs, resamples=resamples, level=level, seed=seed)
    return {"pairs": len(diffs), "diff": statistics.fmean(diffs), "ci_low": lo, "ci_high": hi}


def bootstrap_ratio(
    num: Sequence[float], den: Sequence[float], *, resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of ``sum(num) / sum(den)``, resampling the (num, den) pairs.

    Each pair is one cluster (an image: questions right, questions asked), so the interval reflects
    that questions about one image succeed or fail together. A paired difference of two rates over
    the same clusters is ``bootstrap_ratio(num_a - num_b, den)``. ``None`` without any denominator.
    """
    pairs = [(float(a), float(b)) for a, b in zip(num, den, strict=True)]
    if not pairs or sum(b for _, b in pairs) <= 0:
        return None
    rng = random.Random(seed)
    n = len(pairs)
    stats = []
    for _ in range(resamples):
        draw = rng.choices(pairs, k=n)
        d = sum(b for _, b in draw)
        stats.append(sum(a for a, _ in draw) / d if d > 0 else 0.0)
    stats.sort()
    return stats[int((1 - level) / 2 * (resamples - 1))], stats[int((1 + level) / 2 * (resamples - 1))]


__all__ = ["bootstrap_mean", "bootstrap_ratio", "paired_bootstrap", "sign_test", "wilson"]


def chi_square_sf(x: float, df: int) -> float:
    """P(X >= x) for a chi-square variable with ``df`` degrees of freedom (closed form, no scipy).

    Integer ``df`` only: even df sums a Poisson tail, odd df adds the normal tail (``erfc``); both
    are exact, which is all a goodness-of-fit check of sampled frequencies needs.
    """
    if df < 1:
        raise ValueError(f"chi_square_sf: need df >= 1 (got {df})")
    if x <= 0:
        return 1.0
    h = x / 2.0
    if df % 2 == 0:
        term = total = math.exp(-h)
        for i in range(1, df // 2):
            term *= h / i
            total += term
        return min(1.0, total)
    total = math.erfc(math.sqrt(h))
    term = math.sqrt(2.0 * x / math.pi) * math.exp(-h)
    for i in range(1, (df - 1) // 2 + 1):
        total += term
        term *= x / (2 * i + 1)
    return min(1.0, total)


def chi_square_gof(observed: Sequence[float], probs: Sequence[float]) -> tuple[float, float]:
    """Pearson's goodness-of-fit of counts to probabilities: (statistic, p-value at df = bins - 1)."""
    n = sum(observed)
    if len(observed) != len(probs) or len(observed) < 2 or n <= 0:
        raise ValueError("chi_square_gof: need at least two bins of counts and as many probabilities")
    stat = sum((o - n * p) ** 2 / (n * p) for o, p in zip(observed, probs, strict=True) if p > 0)
    return stat, chi_square_sf(stat, len(observed) - 1)
