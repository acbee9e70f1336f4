"""The chi-square tail the vLLM sampling-parity test relies on, against published critical values."""

from __future__ import annotations

import pytest

from vlrl.core.stats import chi_square_gof, chi_square_sf


@pytest.mark.parametrize(
    ("x", "df", "p"),
    # critical values from standard chi-square tables (odd and even df exercise both closed forms)
    [(3.841, 1, 0.05), (5.991, 2, 0.05), (11.070, 5, 0.05), (20.515, 5, 0.001), (16.812, 6, 0.01), (0.0, 3, 1.0)],
)
def test_chi_square_tail_matches_tables(x, df, p):
    assert chi_square_sf(x, df) == pytest.approx(p, abs=2e-4)


def test_goodness_of_fit_accepts_a_fit_and_rejects_a_misfit():
    probs = [0.1, 0.2, 0.7]
    _, p_fit = chi_square_gof([100, 200, 700], probs)
    stat, p_bad = chi_square_gof([300, 200, 500], probs)
    assert p_fit == pytest.approx(1.0) and p_bad < 1e-6 and stat > 100
    with pytest.raises(ValueError):
        chi_square_gof([1], [1.0])
