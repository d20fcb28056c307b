"""Intervals over seeds against references computed independently: Student's t by integrating its density, a
Monte Carlo coverage check, and the paired interval as the interval of per-seed differences."""
import math
import random

import numpy as np
import pytest

from compclip.stats import binomial_se, fmt, fmt_difference, interval, paired, significant, t975, wilson


def t_cdf(x: float, df: int) -> float:
    """Student's t CDF by the trapezoid rule over its density (no statistics library)."""
    grid = np.linspace(-60.0, x, 400_001)
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    density = c * (1 + grid**2 / df) ** (-(df + 1) / 2)
    return float(((density[1:] + density[:-1]) / 2 * np.diff(grid)).sum())  # numpy 1.x has no trapezoid, 2.x no trapz


@pytest.mark.parametrize("df", [2, 3, 4, 9, 29, 45])
def test_quantile_table_matches_the_integrated_density(df):
    assert t_cdf(t975(df), df) == pytest.approx(0.975, abs=2e-4)


# the table compclip printed from before scipy computed the quantile: t_{0.975}(df) for df = 1..30 to three decimals
OLD_TABLE = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
             2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def test_scipys_quantile_is_the_old_table_to_its_three_decimals_and_exact_past_it():
    assert [round(t975(df), 3) for df in range(1, 31)] == list(OLD_TABLE)
    assert 1.960 < t975(60) < 2.001 and t975(10_000) == pytest.approx(1.95996, abs=5e-4)  # the table said 1.960 past 30


def test_interval_covers_the_true_mean_95_percent_of_the_time():
    rng = random.Random(0)
    hits = 0
    for _ in range(4000):
        mean, half = interval([rng.gauss(3.0, 2.0) for _ in range(3)])
        hits += abs(mean - 3.0) <= half
    assert hits / 4000 == pytest.approx(0.95, abs=0.012)


def test_paired_is_the_interval_of_differences_and_significance_needs_zero_outside():
    a, b = [50.0, 52.0, 51.0], [45.0, 48.0, 46.0]
    mean, half = paired(a, b)
    d = [5.0, 4.0, 5.0]
    sd = math.sqrt(sum((x - sum(d) / 3) ** 2 for x in d) / 2)
    assert mean == pytest.approx(14 / 3) and half == pytest.approx(4.3026527 * sd / math.sqrt(3))
    assert significant(mean, half) and not significant(*paired([50.0, 40.0, 52.0], [45.0, 48.0, 46.0]))
    assert math.isnan(interval([7.0])[1]) and not significant(*interval([7.0])) and fmt(*interval([7.0])) == "7.0"
    assert fmt_difference(-2.0, 1.5) == "-2.0 ± 1.5 *" and fmt_difference(0.4, 1.5) == "+0.4 ± 1.5"
    assert fmt(71.25, 2.14) == "71.2 ± 2.1" and binomial_se(0.5, 1112) < 0.015 < binomial_se(0.5, 1111)
    with pytest.raises(ValueError, match="equal counts"):
        paired([1.0], [1.0, 2.0])


@pytest.mark.parametrize("n", [1, 2, 7, 50, 1000, 123457])
def test_wilson_is_scipys_interval_at_every_count(n):
    from scipy.stats import binomtest

    for right in sorted({0, 1, n // 3, n // 2, n - 1, n}):
        reference = binomtest(right, n).proportion_ci(0.95, method="wilson")
        assert wilson(right, n) == pytest.approx((reference.low, reference.high), abs=1e-12)
    assert (wilson(0, n)[0], wilson(n, n)[1]) == (0.0, 1.0)  # exactly, as scipy's: not a rounding below 0 or over 1
    with pytest.raises(ValueError, match="right=3, n=2"):
        wilson(3, 2)
