"""Small, dependency-free interval estimates and tests for evaluation reports.

Evaluation numbers in vlrl come from a few hundred images at most, so a point estimate alone says
little: a 0.56 win rate over 50 pairs is not distinguishable from a coin. Every report carries an
interval next to its estimate:

* :func:`wilson` — the Wilson score interval for a proportion (well behaved at 0, 1 and small n,
  unlike the normal approximation);
* :func:`sign_test` — the exact two-sided binomial sign test of wins against losses (ties dropped);
* :func:`bootstrap_mean` — a percentile bootstrap interval of a mean, seeded, for quantities that
  are not simple proportions (per-image accuracies, arena scores).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence


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
    means = sorted(sum(vals[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    lo = means[int((1 - level) / 2 * (resamples - 1))]
    hi = means[int((1 + level) / 2 * (resamples - 1))]
    return lo, hi


__all__ = ["bootstrap_mean", "sign_test", "wilson"]
