"""Whether two models really differ: the paired bootstrap and the exact McNemar test against brute force on cases whose
answer is known, and `compclip compare` on two models' results from the command line."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from compclip.eval.compare import bootstrap_interval, compare, mcnemar_exact
from conftest import run_main


def brute_mcnemar(b: int, c: int) -> float:
    """Two-sided exact binomial test at p = ½, by hand: twice the smaller tail, at most 1."""
    n = b + c
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


@pytest.mark.parametrize("b, c", [(0, 0), (3, 3), (0, 12), (5, 1), (17, 30), (1, 40)])
def test_mcnemar_is_the_exact_binomial_test_on_the_discordant_items(b, c):
    assert mcnemar_exact(b, c) == pytest.approx(brute_mcnemar(b, c), rel=1e-12)


def brute_bootstrap(a, b, resamples, seed, chunk=500):
    """The documented procedure, one draw at a time: the same generator calls, means taken by indexing."""
    rng = np.random.default_rng(seed)
    n, out = a.shape[1], []
    for start in range(0, resamples, chunk):
        size = min(chunk, resamples - start)
        items = rng.integers(0, n, (size, n))
        runs_a, runs_b = rng.integers(0, a.shape[0], (size, a.shape[0])), rng.integers(0, b.shape[0], (size, b.shape[0]))
        for k in range(size):
            out.append(b[runs_b[k]][:, items[k]].mean() - a[runs_a[k]][:, items[k]].mean())
    return tuple(np.percentile(out, [2.5, 97.5]))


def test_the_bootstrap_interval_is_the_procedure_written_out():
    rng = np.random.default_rng(3)
    a, b = rng.random((3, 40)) < 0.6, rng.random((2, 40)) < 0.7  # three runs against two, forty items
    assert bootstrap_interval(a, b, 1200, seed=5) == pytest.approx(brute_bootstrap(a.astype(float), b.astype(float), 1200, 5), abs=1e-12)


def frame(model, verdicts, run=0, split="swap_att"):
    return pd.DataFrame({"model": model, "run": run, "benchmark": "sugarcrepe", "split": split,
                         "item": [str(i) for i in range(len(verdicts))], "correct": verdicts})


def test_known_answers_no_difference_and_a_certain_one():
    same = [True, False] * 10
    d = compare(pd.concat([frame("a", same), frame("b", same)]), "a", "b", 2000)[0]
    assert (d.difference, d.low, d.high, d.a_only, d.b_only, d.p_mcnemar, d.significant) == (0, 0, 0, 0, 0, 1.0, False)
    d = compare(pd.concat([frame("a", [True] * 12), frame("b", [False] * 12)]), "a", "b", 2000)[0]
    assert (d.difference, d.a_only, d.b_only) == (-1, 12, 0) and d.low == pytest.approx(-1) == d.high and d.significant
    assert d.p_mcnemar == pytest.approx(2 / 2**12)


def test_two_points_on_666_items_is_within_noise_and_twelve_is_not():
    """SugarCrepe's swap-attribute split: 666 items. B right on 40 items A misses and wrong on 26 A gets (2.1 points
    net) is no difference at 95 %, by the interval and by McNemar; 100 against 20 (12 points) is one by both."""
    a = [i % 3 != 0 for i in range(666)]  # 444 right
    for gain, loss, real in ((40, 26, False), (100, 20, True)):
        wrong, right = [i for i in range(666) if not a[i]][:gain], [i for i in range(666) if a[i]][:loss]
        b = [(v or i in wrong) and i not in right for i, v in enumerate(a)]
        d = compare(pd.concat([frame("a", a), frame("b", b)]), "a", "b", 4000)[0]
        assert (d.b_only, d.a_only) == (gain, loss) and d.difference == pytest.approx((gain - loss) / 666)
        assert d.significant == real and (d.p_mcnemar < 0.05) == real
        assert d.p_mcnemar == pytest.approx(brute_mcnemar(loss, gain), rel=1e-12)


def test_seeds_widen_the_interval_when_they_disagree():
    """Two runs a side that disagree on many items: the interval over seeds and items is wider than over the items of
    one run pair; items only one side scored are left out."""
    rng = np.random.default_rng(0)
    base = rng.random(300) < 0.5
    a = [frame("a", base.tolist(), 0), frame("a", (base ^ (rng.random(300) < 0.3)).tolist(), 1)]
    b = [frame("b", base.tolist(), 0), frame("b", (base ^ (rng.random(300) < 0.3)).tolist(), 1)]
    b.append(pd.DataFrame({"model": "b", "run": [0, 1], "benchmark": "sugarcrepe", "split": "swap_att", "item": ["extra"] * 2,
                           "correct": [True, True]}))
    both = compare(pd.concat(a + b), "a", "b", 4000)[0]
    one = compare(pd.concat([a[0], b[0]]), "a", "b", 4000)[0]
    assert both.n == one.n == 300 and both.p_mcnemar is None and one.p_mcnemar == 1.0
    assert both.high - both.low > (one.high - one.low) + 0.02


def test_compare_from_the_command_line_on_two_models_results(two_models, tmp_path, capsys):
    for name in ("base", "other"):
        (tmp_path / name).symlink_to(two_models / name)
    code, out, err = run_main(capsys, "compare", tmp_path / "base", tmp_path / "other", "--out", tmp_path / "d.json", "--resamples",
                              2000)
    assert code in (0, None), err
    assert "other against base:" in out and "| sugarcrepe-swap_att | swap_att | 666 |" in out
    saved = json.loads((tmp_path / "d.json").read_text())[0]
    acc = {n: json.loads((tmp_path / n / "sugarcrepe-swap_att.json").read_text())["metrics"]["swap_att"]["acc"] for n in ("base", "other")}
    assert saved["acc_a"] == pytest.approx(acc["base"]) and saved["acc_b"] == pytest.approx(acc["other"])
    assert saved["low"] <= saved["difference"] <= saved["high"] and saved["a_only"] + saved["b_only"] > 0
    code, _, err = run_main(capsys, "compare", tmp_path / "base")
    assert code == 2 and "compare needs two models or more" in err
