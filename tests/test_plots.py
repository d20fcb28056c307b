"""The report's figures: every model drawn in a colour of its own, and the legend inside the picture however many."""
import warnings

import numpy as np
import pandas as pd
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
