"""Whether two models really differ: the paired bootstrap and the exact McNemar test against brute force on cases whose
answer is known, and `compclip compare` on two models' results from the command line."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from compclip.errors import UsageError
from compclip.eval.compare import bootstrap_interval, compare, left_out, markdown, mcnemar_exact, table
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
    assert "other against base:" in out and "| sugarcrepe-swap_att | swap_att | accuracy | 666 |" in out
    saved = json.loads((tmp_path / "d.json").read_text())[0]
    acc = {n: json.loads((tmp_path / n / "sugarcrepe-swap_att.json").read_text())["metrics"]["swap_att"]["acc"] for n in ("base", "other")}
    assert saved["acc_a"] == pytest.approx(acc["base"]) and saved["acc_b"] == pytest.approx(acc["other"])
    assert saved["low"] <= saved["difference"] <= saved["high"] and saved["a_only"] + saved["b_only"] > 0
    code, _, err = run_main(capsys, "compare", tmp_path / "base")
    assert code == 2 and "compare needs two models or more" in err


def items_folder(folder, verdicts):
    """A results folder as `compclip eval` writes one run of SugarCrepe's swap_att: its items file, `verdicts` in order."""
    folder.mkdir()
    n = len(verdicts)
    pd.DataFrame({"split": "swap_att", "item": [str(i) for i in range(n)], "image": [f"{i}.jpg" for i in range(n)],
                  "true": [f"a red dog {i}" for i in range(n)], "false": [f"a blue dog {i}" for i in range(n)], "score_true": 0.2,
                  "score_false": 0.1, "correct": verdicts, "tie": False}).to_parquet(folder / "sugarcrepe.items.parquet", index=False)
    return str(folder)


def compared(capsys, tmp_path, a, b):
    """`compclip compare A B`: its table's row and the difference it writes."""
    code, out, err = run_main(capsys, "compare", a, b, "--label", "A", "--label", "B", "--out", tmp_path / "d.json", "--resamples", 500)
    assert code in (0, None), err
    row = next(line for line in out.splitlines() if line.startswith("| sugarcrepe | swap_att |"))
    return [cell.strip() for cell in row.strip("|").split("|")], json.loads((tmp_path / "d.json").read_text())[0]


def test_mcnemar_is_printed_for_one_run_against_one_run_only(tmp_path, capsys):
    """McNemar's test pairs one run with one run: where either side is several runs (seeds), whichever side, `compare`
    prints "—" in its column and writes null; one run a side, its p."""
    rng = np.random.default_rng(1)
    base = rng.random(60) < 0.5
    one = items_folder(tmp_path / "one", base.tolist())
    seeds = ",".join(items_folder(tmp_path / f"seed{s}", (base ^ (rng.random(60) < 0.3)).tolist()) for s in range(3))
    for a, b in ((one, seeds), (seeds, one)):
        cells, saved = compared(capsys, tmp_path, a, b)
        assert cells[-1] == "—" and saved["p_mcnemar"] is None, cells
    cells, saved = compared(capsys, tmp_path, one, seeds.split(",")[0])
    assert cells[-1] == f"{saved['p_mcnemar']:.3g}" and 0 < saved["p_mcnemar"] <= 1


def test_identical_seeds_are_no_difference_and_get_no_star(tmp_path, capsys):
    """Two models whose three seeds each answer every item alike: a difference of 0 with an interval of 0 to 0 is no
    difference, unstarred, in `compare`'s table and in the demo's seed table (0 ± 0)."""
    from compclip.demo import COLUMNS, SPLITS, seed_table

    verdicts = [i % 3 != 0 for i in range(30)]
    a, b = (",".join(items_folder(tmp_path / f"{m}{s}", verdicts) for s in range(3)) for m in "ab")
    cells, saved = compared(capsys, tmp_path, a, b)
    difference = next(c for c in cells if c.startswith(("+", "-")) and "[" in c)  # the B − A column, wherever it stands
    assert difference == "+0.0 [+0.0, +0.0] (too few discordant items to tell)" and not saved["significant"], cells
    same = {split: {h: [50.0, 50.0, 50.0] for h in COLUMNS} for split in SPLITS}
    markdown_table = seed_table({"base": same, "x-ft": same, "y-ft": same}, "t")[1]
    row = next(line for line in markdown_table.splitlines() if line.startswith("| y-ft − x-ft | seen |"))
    assert row.split(" | ")[2:] == ["+0.0 ± 0.0"] * (len(COLUMNS) - 1) + ["+0.0 ± 0.0 |"], row


# ---- pairing by what an item is, not by its id alone ------------------------------------------------------------------

def choice_items(model, verdicts, texts, images=None, split="adj", benchmark="vl_checklist", ids=None):
    """Items as a choice benchmark writes them: `texts` each item's options (true first), `ids` its id as the official
    file names it (VL-CheckList: the image, which several records share)."""
    n = len(verdicts)
    images = images or [f"img{i // 2}.jpg" for i in range(n)]
    ids = ids or images
    return pd.DataFrame({"model": model, "run": 0, "benchmark": benchmark, "split": split, "item": ids, "image": images,
                         "true": [t[0] for t in texts], "false": [t[1] for t in texts], "texts": [list(t) for t in texts],
                         "correct": verdicts})


def test_items_that_share_an_id_are_paired_by_what_they_are_not_by_the_first_row():
    """VL-CheckList names each record by its image: 12 records on 6 images. Every record is paired with its own (n is
    12, each side's accuracy is its result's), where a pivot on the id kept the first row of each (n 6, A 100 %)."""
    texts = [(f"a {c} dog", f"a {o} dog") for c, o in zip(["red", "blue"] * 6, ["green", "pink"] * 6, strict=True)]
    a = [True, False, True, False, True, False, True, False, True, False, True, True]  # 7 of 12
    b = [False, True, False, True, True, True, True, True, False, False, True, False]  # 7 of 12, other records
    d, = compare(pd.concat([choice_items("A", a, texts), choice_items("B", b, texts)]), "A", "B", resamples=500)
    assert (d.n, d.acc_a, d.acc_b) == (12, pytest.approx(7 / 12), pytest.approx(7 / 12))
    pairs = list(zip(a, b, strict=True))
    assert (d.a_only, d.b_only) == (sum(x and not y for x, y in pairs), sum(y and not x for x, y in pairs))
    shuffled = choice_items("B", b, texts).iloc[[1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10]]  # B wrote each image's records in another order
    d2, = compare(pd.concat([choice_items("A", a, texts), shuffled]), "A", "B", resamples=500)
    assert (d2.n, d2.a_only, d2.b_only) == (d.n, d.a_only, d.b_only)
    twice, images = texts + texts[:1], [f"img{i // 2}.jpg" for i in range(12)] + ["img0.jpg"]  # a record repeated to the letter:
    d3, = compare(pd.concat([choice_items("A", [*a, False], twice, images), choice_items("B", [*b, True], twice, images)]),  # each
                  "A", "B", resamples=500)  # copy its own item, paired in order
    assert (d3.n, d3.b_only) == (13, d.b_only + 1)


def test_items_under_the_same_ids_with_other_content_are_refused():
    texts = [("a red dog", "a blue dog"), ("a cat", "two cats")]
    other = [("a red dog", "a blue dog"), ("a tall cat", "two cats")]  # another release: item 1's options changed
    items = pd.concat([choice_items("A", [True, True], texts, ids=["0", "1"]), choice_items("B", [True, False], other, ids=["0", "1"])])
    with pytest.raises(UsageError, match=r"^A and B both scored item 1 of vl_checklist/adj, but not the same item there \(its image "
                                         r"or captions differ; 1 such item\(s\)\)"):
        compare(items, "A", "B", resamples=500)
    # items of the leading columns alone (no `texts`): the true caption says what each is, its columns read as pandas
    # types them (strings, and optional columns missing in every row)
    plain = [frame(m, [True, True]).assign(image="x.jpg", true=t, false="a blue dog").astype({"true": "str"})
             for m, t in (("A", ["a red dog", "a cat"]), ("B", ["a red dog", "a tall cat"]))]
    with pytest.raises(UsageError, match=r"^A and B both scored item 1 of sugarcrepe/swap_att, but not the same item there"):
        compare(pd.concat(plain).assign(direction=pd.Series(None, dtype="str")), "A", "B", resamples=500)


def test_one_item_a_split_is_no_star_and_the_table_says_why():
    """One item, A wrong and B right: the bootstrap interval is the point +100, which excludes zero, but one discordant
    item cannot be told from chance (McNemar's p is 1): no star, here or in paired.csv's `significant`."""
    d, = compare(pd.concat([frame("A", [False]), frame("B", [True])]), "A", "B", resamples=500)
    assert (d.low, d.high, d.p_mcnemar) == (1.0, 1.0, 1.0)
    assert not d.resolvable and not d.significant and not table([d])["significant"][0]
    assert "+100.0 [+100.0, +100.0] (too few discordant items to tell)" in markdown([d])
    six = compare(pd.concat([frame("A", [False] * 6), frame("B", [True] * 6)]), "A", "B", resamples=500)[0]
    assert six.resolvable and six.significant and "[+100.0, +100.0] * |" in markdown([six])  # 2 · ½⁶ < 5 %: the test can reject


def test_what_one_side_scored_alone_is_said_with_its_full_result():
    """B scored 4 of A's 6 items of one split and a benchmark A lacks: the pairs are the 4, each side's full result is
    beside them, and both omissions are said."""
    a = frame("A", [True, True, False, False, True, False])
    b = pd.concat([frame("B", [True, False, True, True]), frame("B", [True], split="other")])
    items = pd.concat([a, b])
    d, = compare(items, "A", "B", resamples=500)
    assert (d.n, d.n_a, d.n_b, d.acc_a, d.acc_a_all, d.acc_b_all) == (4, 6, 4, 0.5, 0.5, 0.75)
    notes = left_out(items, "A", "B", [d])
    assert notes == ["sugarcrepe/other: scored by B alone, left out",
                     "sugarcrepe/swap_att: 2 of A's 6 items left out (the other did not score them); A on all 6: 50.0"]
    assert markdown([d], notes).endswith("\n- " + notes[1])


def test_the_gallery_marks_as_disagreeing_the_records_the_models_answer_differently():
    """Three records of one image, the third a copy of the second to the letter: the models agree on the first two and
    disagree on the copy; only the copy's card is marked (a pivot on the id compared the first records alone)."""
    from compclip.eval.gallery import write_gallery

    texts = [("a red dog", "a blue dog"), ("a dog on grass", "a dog on snow"), ("a dog on grass", "a dog on snow")]
    items = pd.concat([choice_items(m, v, texts, images=["img.jpg"] * 3) for m, v in (("A", [False] * 3), ("B", [False, False, True]))])
    items = items.assign(score_true=0.1, score_false=0.2, tie=False)
    import re
    import tempfile
    from pathlib import Path

    page = write_gallery(items, Path(tempfile.mkdtemp()) / "g.html").read_text(encoding="utf-8")
    cards = re.findall(r'data-model="(\w)"[^>]*data-disagree="(\d)".*?class="true">✓ ([^<]*?) <span', page)
    assert sorted(cards) == [("A", "0", "a dog on grass"), ("A", "0", "a red dog"), ("A", "1", "a dog on grass"),
                             ("B", "0", "a dog on grass"), ("B", "0", "a red dog")], cards


@pytest.mark.parametrize("change, said", [
    ({"correct": ["yes", "no"]}, "column correct holds 'yes', not true or false"),
    ({"correct": None}, "not an items file of compclip eval: no column correct"),
])
def test_an_items_file_of_another_making_is_one_line_naming_it(tmp_path, capsys, change, said):
    good = choice_items("A", [True, False], [("a red dog", "a blue dog"), ("a cat", "two cats")]).drop(columns=["model", "run"])
    good = good.assign(score_true=0.2, score_false=0.1, tie=False).drop(columns=["benchmark"])
    bad = good.drop(columns=[k for k, v in change.items() if v is None]).assign(**{k: v for k, v in change.items() if v is not None})
    for name, frame in (("a", good), ("b", bad)):
        (tmp_path / name).mkdir()
        frame.to_parquet(tmp_path / name / "vl_checklist.items.parquet", index=False)
    code, _, err = run_main(capsys, "compare", tmp_path / "a", tmp_path / "b")
    tail = ": not an items file of compclip eval" if "holds" in said else ""  # (the missing column's line says it first)
    assert code == 2 and err.strip().splitlines() == [f"error: {tmp_path / 'b' / 'vl_checklist.items.parquet'}: {said}{tail}"], err


def test_a_split_scored_exactly_zero_reads_back_as_zero_everywhere(tmp_path, capsys):
    """A model wrong on every item of a split: 0 is its score, not a missing one, in `load_results`, `results_frame`,
    the report's table and `compare` (a value of 0 is falsy: each reader must tell it from None)."""
    from compclip.eval.report import build_report
    from compclip.eval.results import load_results, results_frame

    texts = [("a red dog", "a blue dog"), ("a cat", "two cats")]
    for name, verdicts in (("zero", [False, False]), ("half", [True, False])):
        (tmp_path / name).mkdir()
        acc = sum(verdicts) / 2
        (tmp_path / name / "vl_checklist.json").write_text(json.dumps({"dataset": "vl_checklist", "ties": "strict",
                                                                       "metrics": {"adj": {"acc": acc, "n": 2}, "acc": acc}}))
        items = choice_items(name, verdicts, texts).drop(columns=["model", "run", "benchmark"])
        items.assign(score_true=0.1, score_false=0.2, tie=False).to_parquet(tmp_path / name / "vl_checklist.items.parquet", index=False)
    folders = [tmp_path / "zero", tmp_path / "half"]
    assert load_results(folders)["zero"]["vl_checklist"]["metrics"]["adj"]["acc"] == 0.0
    frame = results_frame(folders).set_index(["model", "split", "metric"])["value"]
    assert frame[("zero", "adj", "acc")] == 0.0 and frame[("zero", "", "acc")] == 0.0 and frame[("half", "adj", "acc")] == 0.5
    report = build_report(folders, tmp_path / "report").read_text()
    section = report.split("## vl_checklist", 1)[1]
    assert "| zero | 0.0 | 0.0 |" in section and "| half | 50.0 | 50.0 |" in section, section
    code, _, err = run_main(capsys, "compare", *folders, "--out", tmp_path / "d.json", "--resamples", 200)
    assert code in (0, None), err
    saved, = json.loads((tmp_path / "d.json").read_text())
    assert (saved["n"], saved["acc_a"], saved["acc_b"], saved["acc_a_all"]) == (2, 0.0, 0.5, 0.0)


def test_a_benchmark_no_model_has_a_number_for_is_reported_without_numpys_all_nan_warning(tmp_path, capsys):
    """Model a lacks vl_checklist, model b ran it without a number for its one split: the benchmark's table and figure
    have no value at all. `report` writes them (b's cell "—", a figure without a bar) with warnings raised as errors:
    numpy's "All-NaN axis encountered" is not printed at the user."""
    import warnings

    for name, result in (("a", {"dataset": "sugarcrepe", "metrics": {"add_att": {"acc": 0.75, "n": 4}}}),
                         ("b", {"dataset": "vl_checklist", "metrics": {"adj": {"acc": None, "n": 4}}})):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{result['dataset']}.json").write_text(json.dumps({**result, "ties": "strict"}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, _, err = run_main(capsys, "report", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "report")
    assert code in (0, None) and err == "", err
    section = (tmp_path / "report" / "report.md").read_text().split("## vl_checklist", 1)[1]
    assert "| model | adj |\n| --- | --- |\n| b | — |\n" in section and "| a |" not in section, section
    assert all((tmp_path / "report" / f"vl_checklist.{kind}").stat().st_size for kind in ("png", "pdf", "svg"))


def test_a_score_of_exactly_zero_or_one_is_shown_and_one_just_outside_is_refused(tmp_path, capsys):
    """[0, 1] is closed: a split all wrong (0.0) and one all right (1.0) are scores `report` shows (0.0 and 100.0); -0.01
    and 1.01 are not fractions, each refused in one line naming the file, the metric and the value."""
    folder = tmp_path / "edge"
    folder.mkdir()

    def result(add, replace):
        (folder / "sugarcrepe.json").write_text(json.dumps({"dataset": "sugarcrepe", "ties": "strict", "metrics": {
            "add_att": {"acc": add, "n": 2}, "replace_att": {"acc": replace, "n": 2}}}))

    result(0.0, 1.0)
    code, _, err = run_main(capsys, "report", folder, "--out", tmp_path / "report")
    assert code in (0, None), err
    section = (tmp_path / "report" / "report.md").read_text().split("## sugarcrepe", 1)[1]
    assert "| edge | 0.0 | 100.0 |" in section, section
    for add, replace, bad in ((-0.01, 1.0, "add_att.acc is -0.01"), (0.0, 1.01, "replace_att.acc is 1.01")):
        result(add, replace)
        code, _, err = run_main(capsys, "report", folder, "--out", tmp_path / "again")
        assert code == 2 and err == f"error: {folder / 'sugarcrepe.json'}: metrics.{bad}, outside [0, 1] (a score is a fraction; 1 such)\n"


def test_one_run_a_side_is_scipys_paired_bootstrap():
    """With one run each, the two-level bootstrap is scipy's `bootstrap(paired=True)` percentile interval of the mean
    difference: the same interval up to Monte Carlo error (10,000 draws each, other generators)."""
    from scipy.stats import bootstrap

    rng = np.random.default_rng(3)
    a = rng.random(400) < 0.6
    b = (rng.random(400) < 0.5) | a & (rng.random(400) < 0.5)
    ours = bootstrap_interval(a[None, :], b[None, :], resamples=10_000, seed=0)
    theirs = bootstrap((a.astype(float), b.astype(float)), lambda x, y, axis=-1: y.mean(axis) - x.mean(axis), paired=True,
                       n_resamples=10_000, method="percentile", random_state=1).confidence_interval
    assert ours == pytest.approx((theirs.low, theirs.high), abs=0.006)


def holm_by_its_procedure(pvalues, alpha):
    """Holm's step-down test as its paper states it: the smallest p first, the i-th of m rejected while it is at most
    alpha / (m - i + 1); the first kept stops it. The tests it rejects, by position."""
    rejected = set()
    for i, (p, k) in enumerate(sorted((p, k) for k, p in enumerate(pvalues))):
        if p > alpha / (len(pvalues) - i):
            break
        rejected.add(k)
    return rejected


def test_compare_names_each_rows_metric_and_holm_adjusts_mcnemar_over_the_splits(tmp_path, capsys):
    """Two models' items as `compclip eval` writes them, on five SugarCrepe splits (B ahead by more or less), a
    SugarCrepe++ split and a retrieval set: each row says what it compares (SugarCrepe++'s ITT, retrieval's R@1 and
    its query directions), and a split's adjusted p is under a level exactly where Holm's procedure, run at that level
    on the raw p's, rejects it."""
    import torch

    from compclip.eval.items import choice_rows, retrieval_rows, write_items
    from compclip.eval.protocols import query_ranks

    rng = np.random.default_rng(0)
    a_right = rng.random((7, 60)) < 0.6
    b_right = {"A": a_right, "B": a_right | (rng.random((7, 60)) < np.array([0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5])[:, None])}
    for model, right in b_right.items():
        (tmp_path / model).mkdir()
        for k, split in enumerate(("replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")):
            scores = torch.tensor(np.where(right[k][:, None], [[0.3, 0.1]], [[0.1, 0.3]]))
            rows = choice_rows(split, range(60), [f"{split}{i}.jpg" for i in range(60)], [(f"a {i}", f"not a {i}") for i in range(60)],
                               scores, torch.tensor(right[k]))
            write_items(tmp_path / model / f"sugarcrepe-{split}.items.parquet", rows)
        scores = torch.tensor(np.where(right[5][:, None], [[0.3, 0.3, 0.1]], [[0.3, 0.1, 0.3]]))
        texts = [(f"a {i}", f"one {i}", f"no {i}") for i in range(60)]  # a caption, its paraphrase, the negative
        write_items(tmp_path / model / "sugarcrepe_pp.items.parquet",
                    choice_rows("swap_att", range(60), [f"pp{i}.jpg" for i in range(60)], texts, scores, torch.tensor(right[5]), n_true=2))
        owner = torch.arange(30).repeat_interleave(2)  # 30 images, 2 captions each
        positives, following = ((owner[:, None] + shift) % 30 == torch.arange(30)[None, :] for shift in (0, 1))
        scores = 0.1 + 0.4 * positives + 0.6 * (following & torch.tensor(~right[6])[:, None])  # a wrong caption finds the next image
        ranks = query_ranks(scores, positives, "strict"), query_ranks(scores.T, positives.T, "strict")
        write_items(tmp_path / model / "retrieval.items.parquet",
                    retrieval_rows("set", [f"r{i}.jpg" for i in range(30)], [f"c {i}" for i in range(60)], owner, scores, ranks))
    code, out, err = run_main(capsys, "compare", tmp_path / "A", tmp_path / "B", "--out", tmp_path / "d.csv", "--resamples", 200)
    assert code in (0, None), err
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0][2:4] == ["metric", "n"] and rows[0][-2:] == ["McNemar p", "Holm p |"]
    named = {(r[0].removeprefix("| "), r[1]): r[2] for r in rows[1:]}
    assert named == {**{(f"sugarcrepe-{s}", s): "accuracy" for s in ("replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")},
                     ("sugarcrepe_pp", "swap_att"): "ITT accuracy", ("retrieval", "set"): "R@1, image→text and text→image pooled"}
    saved = pd.read_csv(tmp_path / "d.csv")  # every digit (JSON keeps ten decimals)
    raw, adjusted = saved["p_mcnemar"].tolist(), saved["p_holm"].tolist()
    assert len(raw) == 7 and len({round(p, 6) for p in raw}) >= 5  # p's that differ, some small, some not
    levels = sorted({*raw, *(p * m for p in raw for m in range(1, 8)), 0.01, 0.05})
    for alpha in [x * f for x in levels for f in (1 - 1e-9, 1 + 1e-9) if x * f < 1]:  # a level, under 1
        assert {k for k, p in enumerate(adjusted) if p <= alpha} == holm_by_its_procedure(raw, alpha), alpha
    assert all(p_holm >= p for p, p_holm in zip(raw, adjusted, strict=True)) and min(adjusted) < 0.05 < max(adjusted)
