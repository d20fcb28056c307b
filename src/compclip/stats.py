"""Means over seeds with 95 % confidence intervals, and paired differences between two methods.

A run's seed changes its initialisation and data order, so seeds are repeated measurements of one
configuration: the interval is Student's t over them (few seeds: a normal interval would be too
narrow). Two methods run with the same seeds are compared seed by seed (a paired interval), and
a difference is called significant only when its interval excludes zero.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist


def t975(df: int) -> float:
    """The 97.5 % quantile of Student's t with `df` degrees of freedom (scipy's)."""
    from scipy.stats import t

    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, not {df}")
    return float(t.ppf(0.975, df))


def interval(values: Sequence[float]) -> tuple[float, float]:
    """(mean, half-width of its 95 % interval); the half-width is NaN for a single value."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("no values")
    n = len(values)
    mean = sum(values) / n
    if n == 1:
        return mean, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, t975(n - 1) * sd / math.sqrt(n)


def paired(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Mean and 95 % half-width of a − b over matched seeds."""
    if len(a) != len(b):
        raise ValueError(f"paired values need equal counts, not {len(a)} and {len(b)}")
    return interval([x - y for x, y in zip(a, b, strict=True)])


def significant(mean: float, half: float) -> bool:
    """The interval excludes zero."""
    return not math.isnan(half) and abs(mean) > half


Z975 = NormalDist().inv_cdf(0.975)  # the normal's 97.5 % quantile, 1.959964...


def wilson(right: int, n: int) -> tuple[float, float]:
    """The 95 % Wilson interval of `right` of `n` items, as fractions: scipy's `binomtest(...).proportion_ci(method=
    "wilson")` (Newcombe 1998, without continuity correction), written out because importing scipy.stats takes longer
    than a report of a few hundred splits takes to build."""
    if not 0 <= right <= n or n < 1:
        raise ValueError(f"a Wilson interval needs 0 <= right <= n and n >= 1, not right={right}, n={n}")
    p = right / n
    denom = 2 * (n + Z975**2)
    center = (2 * n * p + Z975**2) / denom
    delta = Z975 / denom * math.sqrt(4 * n * p * (1 - p) + Z975**2)
    return 0.0 if right == 0 else center - delta, 1.0 if right == n else center + delta


def binomial_se(p: float, n: int) -> float:
    """Standard error of an accuracy `p` (0..1) measured on `n` independent items, in the same units as p."""
    return math.sqrt(p * (1 - p) / n)


def fmt(mean: float, half: float, digits: int = 1) -> str:
    """"71.3 ± 2.1", or the mean alone when there is no interval."""
    return f"{mean:.{digits}f}" if math.isnan(half) else f"{mean:.{digits}f} ± {half:.{digits}f}"


def fmt_difference(mean: float, half: float, digits: int = 1) -> str:
    """"+4.2 ± 3.1 *": signed, with `*` where the interval excludes zero."""
    return ("+" if mean >= 0 else "") + fmt(mean, half, digits) + (" *" if significant(mean, half) else "")
