"""`compclip compare`: whether two models really differ, item by item, on every benchmark and split both scored.

Both models answered the same items, so their accuracies are compared paired: the difference B − A with a 95 %
interval from a paired bootstrap (the items resampled with replacement, the same draw for both models, seeded), and
an exact McNemar test on the discordant items (those one model gets right and the other wrong: under no difference
each is equally likely to favour either model, a two-sided binomial test with p = ½, `scipy.stats.binomtest`).

A model may be several runs of one method (seeds): then each bootstrap draw also resamples each side's runs with
replacement before its items (a two-level bootstrap, seeds then items), so the interval holds the variation between
seeds as well as that between items; the accuracy of a side is the mean over its runs. McNemar's test pairs one run
with one run, so it is given only where each side is one run.

Each row names what it compares (`metric`): a benchmark's verdict (SugarCrepe++'s ITT, Winoground's group score,
retrieval's R@1 with the directions of its queries). With a dozen splits a p under 0.05 comes by chance alone in about
half of all comparisons of two equal models, so each McNemar p is also given Holm-adjusted over the splits of one
comparison (`holm`): it controls the chance of any false call among them, assuming nothing of how the splits depend.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import UsageError
from .base import REGISTRY
from .items import IDENTITY, identified
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
    n_a: int  # items of this split each side scored, paired or not, and its accuracy over them all (its own result)
    n_b: int
    acc_a_all: float
    acc_b_all: float
    metric: str = "accuracy"  # what an item's verdict measures (`metric`)
    p_holm: float | None = None  # p_mcnemar, Holm-adjusted over the comparison's splits (`holm`)

    @property
    def resolvable(self) -> bool:
        """Whether the discordant items are enough for a difference to be told from chance at all: the exact test's
        smallest two-sided p, 2 · ½^d for d discordant items, is under 5 % from d = 6 on. Below that a bootstrap interval
        that excludes zero (a single item's, say) is the resampling's narrowness, not evidence."""
        return mcnemar_exact(self.a_only + self.b_only, 0) < 0.05

    @property
    def significant(self) -> bool:
        return self.resolvable and (self.low > 0 or self.high < 0)


def bootstrap_interval(a: np.ndarray, b: np.ndarray, resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """The 95 % percentile interval of mean(b) − mean(a) for verdicts `a` (runs_a × items) and `b` (runs_b × items) on the
    same items: each draw resamples the items (the same ones for both) and each side's runs, with replacement. Our own
    because scipy's `bootstrap(paired=True)` resamples the items alone: with one run a side it is that (tested)."""
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
    """Each draw's index counts as weights summing to one (draws × size): one `bincount` over the draws laid end to end
    (`np.add.at`, unbuffered, took 2/3 of a demo report's time)."""
    rows = draws.shape[0]
    counts = np.bincount((np.arange(rows)[:, None] * size + draws).ravel(), minlength=rows * size)
    return counts.reshape(rows, size) / draws.shape[1]


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """The exact two-sided McNemar p-value of `a_only` against `b_only` discordant items."""
    from scipy.stats import binomtest

    n = a_only + b_only
    return 1.0 if n == 0 else float(binomtest(a_only, n, 0.5).pvalue)


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of `pvalues` (None: no test, left out of the count): the k-th smallest of m p's
    times m − k + 1, at most 1, and never below an adjusted p before it. Rejecting where the adjusted p is under α keeps
    the chance of any false rejection under α, whatever the tests' dependence."""
    tested = sorted((p, k) for k, p in enumerate(pvalues) if p is not None)
    adjusted: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, k) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[k] = running
    return adjusted


def metric(items: pd.DataFrame, benchmark: str, split: str) -> str:
    """What a split's verdicts measure, as a row names it: its benchmark's (`Benchmark.verdict`; a result file's name
    is the benchmark's, then `-SPLIT` where one split was run), and for retrieval the directions of its queries, both
    pooled in one row where both were scored."""
    name = benchmark.partition("-")[0]
    said = REGISTRY[name].verdict if name in REGISTRY else "accuracy"
    if "direction" not in items:
        return said
    rows = items[(items["benchmark"] == benchmark) & (items["split"].astype(str) == split)]
    directions = sorted(d for d in rows["direction"].dropna().unique() if d)
    return said if not directions else f"{said}, {' and '.join(directions)}" + (" pooled" if len(directions) > 1 else "")


def verdicts(items: pd.DataFrame, model: str) -> pd.DataFrame:
    """One model's verdicts, one column per run (its folders), indexed by benchmark, split, item, the item's identity
    (what makes it that item: repeated ids, such as VL-CheckList's records of one image, are told apart by it) and which
    copy of an identical item it is."""
    mine = items[items["model"] == model]
    mine = identified(mine.assign(correct=mine["correct"].astype(float)), ["run", *KEY])
    return mine.pivot_table(index=IDENTITY, columns="run", values="correct", aggfunc="first").rename(columns=str)


def refuse_other_items(va: pd.DataFrame, vb: pd.DataFrame, a: str, b: str) -> None:
    """Two results that name an item alike but mean another by it (another release, another subset under the same
    name): each has a content under that id the other lacks. Refused, naming the first such item."""
    ids_a = va.index.droplevel("copy").unique().to_frame(index=False)
    ids_b = vb.index.droplevel("copy").unique().to_frame(index=False)
    merged = ids_a.merge(ids_b, on=[*KEY, "identity"], how="outer", indicator=True)
    lone = merged[merged["_merge"] != "both"]
    clash = lone.groupby(KEY)["_merge"].nunique()
    clash = clash[clash > 1]
    if len(clash):
        benchmark, split, item = clash.index[0]
        raise UsageError(f"{a} and {b} both scored item {item} of {benchmark}{'/' + split if split else ''}, but not the same item "
                         f"there (its image or captions differ; {len(clash)} such item(s)): results of another release or subset "
                         "under the same name, which cannot be paired")


def compare(items: pd.DataFrame, a: str, b: str, resamples: int = RESAMPLES, seed: int = 0) -> list[Difference]:
    """B against A on every benchmark split both scored, over the items both scored, paired by what each item is
    (`items`: `load_items`' columns plus `run`, which distinguishes a model's runs). Each difference also carries each
    side's own result over all of its items of the split; `left_out` says what one side scored alone."""
    va, vb = verdicts(items, a), verdicts(items, b)
    refuse_other_items(va, vb, a, b)
    both = va.add_suffix("_a").join(vb.add_suffix("_b"), how="inner").dropna()
    if both.empty:
        raise UsageError(f"{a} and {b} scored no item in common: compare results of the same benchmarks and splits")
    out = []
    for (benchmark, split), group in both.groupby(level=["benchmark", "split"], sort=True):
        all_a, all_b = (v.xs((benchmark, split), level=["benchmark", "split"]).to_numpy() for v in (va, vb))
        runs_a = group[[c for c in group.columns if c.endswith("_a")]].to_numpy().T
        runs_b = group[[c for c in group.columns if c.endswith("_b")]].to_numpy().T
        low, high = bootstrap_interval(runs_a, runs_b, resamples, seed)
        mean_a, mean_b = runs_a.mean(0), runs_b.mean(0)  # each item's verdict, over a side's runs
        a_only, b_only = int((mean_a > mean_b).sum()), int((mean_b > mean_a).sum())
        single = runs_a.shape[0] == runs_b.shape[0] == 1
        acc_a, acc_b = float(runs_a.mean()), float(runs_b.mean())
        out.append(Difference(benchmark, split, a, b, group.shape[0], acc_a, acc_b, acc_b - acc_a, low, high, a_only, b_only,
                              mcnemar_exact(a_only, b_only) if single else None, len(all_a), len(all_b),
                              float(np.nanmean(all_a)), float(np.nanmean(all_b)), metric(items, benchmark, str(split))))
    return [replace(d, p_holm=p) for d, p in zip(out, holm([d.p_mcnemar for d in out]), strict=True)]


def left_out(items: pd.DataFrame, a: str, b: str, differences: list[Difference]) -> list[str]:
    """What the paired figures leave out, in words: benchmark splits one side alone scored, and within a split compared,
    the items one side alone scored (its full result beside the paired one)."""
    splits = {m: set(map(tuple, items.loc[items["model"] == m, ["benchmark", "split"]].drop_duplicates().to_numpy())) for m in (a, b)}
    lines = []
    for model, other in ((a, b), (b, a)):
        for benchmark, split in sorted(splits[model] - splits[other]):
            lines.append(f"{benchmark}{'/' + split if split else ''}: scored by {model} alone, left out")
    for d in differences:
        for model, n, acc in ((a, d.n_a, d.acc_a_all), (b, d.n_b, d.acc_b_all)):
            if n > d.n:
                lines.append(f"{d.benchmark}{'/' + d.split if d.split else ''}: {n - d.n} of {model}'s {n} items left out (the other "
                             f"did not score them); {model} on all {n}: {100 * acc:.1f}")
    return lines


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
    return pd.DataFrame([{**asdict(d), "resolvable": d.resolvable, "significant": d.significant} for d in differences])


def markdown(differences: list[Difference], notes: list[str] | None = None) -> str:
    """A table a person reads: each split's accuracies on the paired items, the difference with its interval (`*` where
    it excludes zero and the discordant items are enough to tell, `Difference.resolvable`), the discordant items and
    McNemar's p, also Holm-adjusted over the splits; then `notes` (`left_out`), one a line."""
    lines = ["| benchmark | split | metric | n | A | B | B − A (95 % interval) | A only | B only | McNemar p | Holm p |",
             "| --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    for d in differences:
        p, p_holm = ("—" if v is None else f"{v:.3g}" for v in (d.p_mcnemar, d.p_holm))
        mark = " *" if d.significant else "" if d.resolvable else " (too few discordant items to tell)"
        lines.append(f"| {d.benchmark} | {d.split or '—'} | {d.metric} | {d.n} | {100 * d.acc_a:.1f} | {100 * d.acc_b:.1f} | "
                     f"{100 * d.difference:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}]{mark} | "
                     f"{d.a_only} | {d.b_only} | {p} | {p_holm} |")
    return "\n".join([*lines, *(f"- {line}" for line in (notes or []))] if notes else lines)
