"""`compclip compare`: whether two models really differ, item by item, on every benchmark and split both scored.

Both models answered the same items, so their accuracies are compared paired: the difference B − A with a 95 %
interval from a paired bootstrap (the items resampled with replacement, the same draw for both models, seeded), and
an exact McNemar test on the discordant items (those one model gets right and the other wrong: under no difference
each is equally likely to favour either model, a two-sided binomial test with p = ½, `scipy.stats.binomtest`).

A model may be several runs of one method (seeds): then each bootstrap draw also resamples each side's runs with
replacement before its items (a two-level bootstrap, seeds then items), so the interval holds the variation between
seeds as well as that between items; the accuracy of a side is the mean over its runs. McNemar's test pairs one run
with one run, so it is given only where each side is one run.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import UsageError
from .results import items_frame

KEY = ["benchmark", "split", "item"]
RESAMPLES = 10_000
CHUNK = 500  # bootstrap draws computed at once: CHUNK × items weights in memory


@dataclass(frozen=True)
class Difference:
    """One benchmark split, model B against model A."""

    benchmark: str
    split: str
    a: str
    b: str
    n: int  # items both scored
    acc_a: float
    acc_b: float
    difference: float  # acc_b − acc_a
    low: float  # its 95 % interval
    high: float
    a_only: int  # items A gets right and B wrong (over several runs: items A's runs get right more often)
    b_only: int
    p_mcnemar: float | None  # exact, one run a side; None otherwise

    @property
    def significant(self) -> bool:
        return self.low > 0 or self.high < 0


def bootstrap_interval(a: np.ndarray, b: np.ndarray, resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """The 95 % percentile interval of mean(b) − mean(a) for verdicts `a` (runs_a × items) and `b` (runs_b × items) on the
    same items: each draw resamples the items (the same ones for both) and each side's runs, with replacement."""
    rng = np.random.default_rng(seed)
    n = a.shape[1]
    a, b = a.astype(np.float64), b.astype(np.float64)
    diffs = []
    for start in range(0, resamples, CHUNK):
        size = min(CHUNK, resamples - start)
        items = _weights(rng.integers(0, n, (size, n)), n)
        runs_a, runs_b = (_weights(rng.integers(0, r, (size, r)), r) for r in (a.shape[0], b.shape[0]))
        diffs.append(((runs_b @ b) * items).sum(1) - ((runs_a @ a) * items).sum(1))
    low, high = np.percentile(np.concatenate(diffs), [2.5, 97.5])
    return float(low), float(high)


def _weights(draws: np.ndarray, size: int) -> np.ndarray:
    """Each draw's index counts as weights summing to one (draws × size)."""
    counts = np.zeros((draws.shape[0], size))
    np.add.at(counts, (np.arange(draws.shape[0])[:, None], draws), 1)
    return counts / draws.shape[1]


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """The exact two-sided McNemar p-value of `a_only` against `b_only` discordant items."""
    from scipy.stats import binomtest

    n = a_only + b_only
    return 1.0 if n == 0 else float(binomtest(a_only, n, 0.5).pvalue)


def verdicts(items: pd.DataFrame, model: str) -> pd.DataFrame:
    """One model's verdicts, one column per run (its folders), indexed by benchmark, split and item."""
    mine = items[items["model"] == model]
    wide = mine.pivot_table(index=KEY, columns="run", values="correct", aggfunc="first")
    return wide.astype(float).rename(columns=str)


def compare(items: pd.DataFrame, a: str, b: str, resamples: int = RESAMPLES, seed: int = 0) -> list[Difference]:
    """B against A on every benchmark split both scored, over the items both scored (`items`: `load_items`' columns
    plus `run`, which distinguishes a model's runs)."""
    both = verdicts(items, a).add_suffix("_a").join(verdicts(items, b).add_suffix("_b"), how="inner").dropna()
    if both.empty:
        raise UsageError(f"{a} and {b} scored no item in common: compare results of the same benchmarks and splits")
    out = []
    for (benchmark, split), group in both.groupby(level=["benchmark", "split"], sort=True):
        va = group[[c for c in group.columns if c.endswith("_a")]].to_numpy().T
        vb = group[[c for c in group.columns if c.endswith("_b")]].to_numpy().T
        low, high = bootstrap_interval(va, vb, resamples, seed)
        mean_a, mean_b = va.mean(0), vb.mean(0)  # each item's verdict, over a side's runs
        a_only, b_only = int((mean_a > mean_b).sum()), int((mean_b > mean_a).sum())
        single = va.shape[0] == vb.shape[0] == 1
        out.append(Difference(benchmark, split, a, b, group.shape[0], float(va.mean()), float(vb.mean()), float(vb.mean() - va.mean()),
                              low, high, a_only, b_only, mcnemar_exact(a_only, b_only) if single else None))
    return out


def load_runs(models: list[str], labels: list[str] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """The items of each model (a results folder, or several joined by commas: one method's runs), labelled."""
    names = labels or [Path(m.split(",")[0]).name for m in models]
    if len(set(names)) != len(names):
        raise UsageError(f"models named alike ({', '.join(names)}): name them with --label")
    frames = []
    for name, model in zip(names, models, strict=True):
        for run, folder in enumerate(f for f in model.split(",") if f):
            frames.append(items_frame(folder).assign(model=name, run=run))
    return pd.concat(frames, ignore_index=True), names


def table(differences: list[Difference]) -> pd.DataFrame:
    return pd.DataFrame([{**asdict(d), "significant": d.significant} for d in differences])


def markdown(differences: list[Difference]) -> str:
    """A table a person reads: each split's accuracies, the difference with its interval (`*` where it excludes zero),
    the discordant items and McNemar's p."""
    lines = ["| benchmark | split | n | A | B | B − A (95 % interval) | A only | B only | McNemar p |",
             "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for d in differences:
        p = "—" if d.p_mcnemar is None else f"{d.p_mcnemar:.3g}"
        lines.append(f"| {d.benchmark} | {d.split or '—'} | {d.n} | {100 * d.acc_a:.1f} | {100 * d.acc_b:.1f} | "
                     f"{100 * d.difference:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}]{' *' if d.significant else ''} | "
                     f"{d.a_only} | {d.b_only} | {p} |")
    return "\n".join(lines)
