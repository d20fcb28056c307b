"""The report's figures: every model drawn in a colour of its own, and the legend inside the picture however many."""
import warnings

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from compclip.plots import distinct_colours, grouped_bars


def test_a_figure_of_many_models_gives_each_its_own_colour_and_shows_every_legend_entry(tmp_path):
    n = 36  # the study's first world: six fine-tunes over three seeds and the base, each seen and unseen
    # zero-height bars draw nothing, so a model's colour can only be found in its legend entry
    df = pd.DataFrame({"SC swap-att": [0.0] * n, "ZS shape": [0.0] * n, "SC++ TOT": ["n/a"] * n}, index=[f"m{i}" for i in range(n)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns where a layout cannot fit the legend
        path = grouped_bars(df, "many models", tmp_path / "bars.png")
    colours = [np.round(np.array(c[:3]) * 255) for c in distinct_colours(n)]
    assert len({tuple(c) for c in colours}) == n
    picture = np.asarray(Image.open(path).convert("RGB")).astype(int)
    for i, rgb in enumerate(colours):
        assert (np.abs(picture - rgb).max(axis=-1) <= 2).sum() >= 20, f"model m{i}'s legend entry is not in the picture"


def test_a_split_scored_zero_is_drawn_and_one_not_run_is_left_out(tmp_path):
    """The figures for a paper: a 0 % split is a labelled bar of 0, a split no model ran is no group at all, and a
    split one model did not run is a gap for it alone; intervals only where they are known."""
    from compclip.plots import split_bars

    values = pd.DataFrame({"add_att": [0.0, 40.0], "swap_att": [55.0, float("nan")], "never": [float("nan")] * 2},
                          index=["Model A", "Model B"])
    low = pd.DataFrame({"add_att": [0.0, 35.0], "swap_att": [50.0, float("nan")]}, index=values.index)
    high = pd.DataFrame({"add_att": [0.6, 45.0], "swap_att": [60.0, float("nan")]}, index=values.index)
    path = split_bars(values, low, high, {"add_att": "692", "swap_att": "666"}, {"add_att": 0.5}, "sugarcrepe", tmp_path / "f.png")
    svg = (tmp_path / "f.svg").read_text()
    assert path.suffix == ".png" and (tmp_path / "f.pdf").stat().st_size > 1000
    assert "never" not in svg and "n=692" in svg and "n=666" in svg and "Model A" in svg and "chance" in svg
    assert svg.count('stroke-dasharray') >= 1  # the dashed chance line over add_att
    assert ">0<" in svg.replace(" ", "") or "<!-- 0 -->" in svg  # the 0 % bar's label


def test_each_splits_interval_is_wilsons_over_its_items():
    """The figures' intervals, against Wilson's formula written out; a family's mean of splits has none."""
    import math

    import pytest

    from compclip.eval.report import split_intervals, split_tables

    results = {"m": {"sugarcrepe": {"metrics": {"swap_att": {"acc": 0.4, "n": 666}, "swap": 0.4}}}}
    table = split_tables(results)["sugarcrepe"]
    low, high, counts = split_intervals(results, "sugarcrepe", table)
    z, n, p = 1.959963984540054, 666, round(0.4 * 666) / 666
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert low.loc["m", "swap_att"] == pytest.approx(100 * (centre - half))
    assert high.loc["m", "swap_att"] == pytest.approx(100 * (centre + half))
    assert math.isnan(low.loc["m", "swap"]) and counts == {"swap_att": "666"}


def test_each_error_bar_is_drawn_from_its_low_to_its_high_end():
    """The intervals are asymmetric (Wilson's): read back from the SVG, each bar's error line must span its own low and
    high ends, not the two lengths swapped. Heights in % are read against the bar's own top and the axis at 0."""
    import re
    import tempfile
    from pathlib import Path

    import pytest

    from compclip.plots import split_bars

    values = pd.DataFrame({"a": [40.0], "b": [70.0]}, index=["M"])
    low, high = pd.DataFrame({"a": [10.0], "b": [66.0]}, index=["M"]), pd.DataFrame({"a": [45.0], "b": [90.0]}, index=["M"])
    with tempfile.TemporaryDirectory() as folder:
        split_bars(values, low, high, {}, {}, "asymmetric", Path(folder) / "f.png")
        svg = (Path(folder) / "f.svg").read_text()
    colour = "#" + "".join(f"{round(255 * c):02x}" for c in distinct_colours(1)[0][:3])
    number, point = r"([\d.]+)", r"[\d.]+"
    corners = rf"M {number} {number}\s+L {number} {point}\s+L {point} {number}\s+L {point} {point}\s+z\s*"
    bars = re.findall(rf'<path d="{corners}" clip-path="[^"]*" style="fill: {colour}', svg)  # in the axes (the legend's is not clipped)
    collection = re.search(r'<g id="LineCollection_\d+">(.*?)</g>', svg, re.S).group(1)  # the error lines
    lines = re.findall(r'<path d="M ([\d.]+) ([\d.]+)\s+L [\d.]+ ([\d.]+)\s*"', collection)
    assert len(bars) == 2 and len(lines) == 2, (bars, lines)
    for (left, base, right, top), value, lo, hi in zip(bars, (40.0, 70.0), (10.0, 66.0), (45.0, 90.0), strict=True):
        x = (float(left) + float(right)) / 2
        line = next(ln for ln in lines if abs(float(ln[0]) - x) < 1)  # the error line at this bar's centre
        per_pixel = value / (float(base) - float(top))
        ends = sorted(per_pixel * (float(base) - float(y)) for y in line[1:])
        assert ends == pytest.approx([lo, hi], abs=0.05)


def test_the_axis_fits_the_values_and_a_mean_of_one_part_is_not_drawn_again(tmp_path):
    """Retrieval's R@1 of a few % gets an axis to 2, not a sliver under 100; a one-split run's family mean and overall
    (the same number, no interval of their own) are not two more bars beside the split's."""
    import re

    import pytest

    from compclip.plots import axis_top, split_bars

    assert [axis_top(v) for v in (0.3, 1.2, 4.6, 9.0, 17.0, 45.4, 45.5, 80.0, float("nan"))] == [1, 2, 10, 10, 20, 50, 100, 100, 100]
    values = pd.DataFrame({"swap_att": [1.2], "swap": [1.2], "overall": [1.2]}, index=["M"])
    low = pd.DataFrame({"swap_att": [0.4], "swap": [float("nan")], "overall": [float("nan")]}, index=["M"])
    high = pd.DataFrame({"swap_att": [1.7], "swap": [float("nan")], "overall": [float("nan")]}, index=["M"])
    split_bars(values, low, high, {"swap_att": "666"}, {}, "one split", tmp_path / "f.png")
    svg = (tmp_path / "f.svg").read_text()
    colour = "#" + "".join(f"{round(255 * c):02x}" for c in distinct_colours(1)[0][:3])
    assert len(re.findall(rf'clip-path="[^"]*" style="fill: {colour}"', svg)) == 1  # one bar: swap_att's
    assert "swap_att" in svg and "overall" not in svg
    ticks = [float(t) for t in re.findall(r"<!-- (\d+(?:\.\d+)?) -->", svg)]
    assert max(ticks) == pytest.approx(2.0)  # the axis to 2 %, not 100


def test_a_panel_is_labelled_by_its_run_and_step_where_it_is_a_runs_checkpoint(tmp_path):
    from compclip.models.checkpoint import RunFolder
    from compclip.plots import model_label

    checkpoint = RunFolder(tmp_path / "runs" / "c2lip").step(300)
    assert model_label(str(checkpoint)) == "c2lip step 300"
    for name in ("runs/c2lip/checkpoints/step_03x", "runs/c2lip/checkpoints/300"):  # no step folder: the name as given
        assert model_label(name) == name
    assert model_label("ViT-B-16") == "ViT-B-16" and model_label(str(tmp_path)) == tmp_path.name  # a folder: its last part


@pytest.mark.parametrize("names", [
    [f"runs/c2lip-vitb16-cc3m-seed{i}/checkpoints/step_0001000" for i in range(10)],
    ["/scratch/project/compositionality/runs/c2lip-vitb16-cc3m-lr1e-5-batch768-warmup500-seed0/checkpoints/step_0001000"
     "/exported/open_clip"],  # one name wider than the figure
], ids=["ten-run-folders", "one-name-wider-than-the-figure"])
def test_the_legend_of_long_model_names_stays_inside_the_saved_figure(tmp_path, monkeypatch, names):
    """The summary figure `compclip report` writes, models named by their run folders: the legend, measured by
    matplotlib's renderer, lies within the figure, and the saved image's border is bare background (a legend cut off at
    an edge would cross it). Names that fit the figure's width wrap into rows rather than widen it, and the rows take no
    height from the bars: the axes are as tall as those of one model named "m"."""
    import matplotlib.pyplot as plt

    kept = []
    monkeypatch.setattr(plt, "close", kept.append)  # keeps each figure open to measure it once it is saved
    for models in (["m"], names):
        df = pd.DataFrame({"SC add": [50.0 + i for i in range(len(models))], "ZS mean": [40.0] * len(models)}, index=models)
        path = grouped_bars(df, "summary", tmp_path / f"summary-{len(kept)}.png")
    alone, figure = kept
    for drawn in kept:
        drawn.canvas.draw()
    renderer = figure.canvas.get_renderer()
    assert figure.axes[0].get_window_extent(renderer).height == pytest.approx(alone.axes[0].get_window_extent().height, abs=1)
    (legend,) = figure.legends
    box, frame = legend.get_window_extent(renderer), figure.bbox
    assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1, (box, frame)
    assert [t.get_text() for t in legend.get_texts()] == names
    if len(names) > 1:
        assert figure.get_figwidth() == 6.0  # the summary's width for two columns of bars
    picture = np.asarray(Image.open(path).convert("RGB")).astype(int)
    border = np.concatenate([picture[0], picture[-1], picture[:, 0], picture[:, -1]])
    assert (border >= 250).all(), "something is drawn across the image's edge"
