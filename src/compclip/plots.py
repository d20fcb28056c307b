"""Figures: concept attention maps over an image (C2LIP's Figure 2) and binding curves (OC-CLIP's PUG figure)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from PIL import Image

from .io import atomic_path


def _save(fig, out: str | Path, formats: tuple[str, ...] = ("png",)) -> Path:
    """Write a figure atomically (a reader never sees half a file) as `out` and, for each further format, beside it under
    that suffix (a paper's PDF or SVG), then close it."""
    import matplotlib.pyplot as plt

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for fmt in formats:
        with atomic_path(out.with_suffix(f".{fmt}")) as tmp:
            fig.savefig(tmp, dpi=120, format=fmt)
    plt.close(fig)
    return out.with_suffix(f".{formats[0]}")


def distinct_colours(n: int) -> list:
    """`n` colours, none repeated: matplotlib's qualitative tab10 or tab20, or for more models evenly spaced on turbo."""
    import matplotlib.pyplot as plt

    if n <= 20:
        return list(plt.get_cmap("tab10" if n <= 10 else "tab20").colors)[:n]
    return [tuple(c) for c in plt.get_cmap("turbo")(np.linspace(0.05, 0.95, n))]


LEGEND_COLUMNS = 6  # at most, below the axes
LEGEND_MARGIN = 0.15  # inches the legend keeps from each side of the figure (the constrained layout's padding and more)


def _legend_below(fig) -> None:
    """The legend under the axes, in as many columns (up to `LEGEND_COLUMNS`) as the figure's width holds, the figure
    made taller by the legend's height, and wider where a single entry is wider than it: with the `constrained` layout
    the legend is then never clipped and never over the data, however many models and however long their names (run
    folders as labels). Sizes are measured by the renderer, so they hold at any dpi the figure is saved at."""
    handles, labels = [], []
    for ax in fig.axes:
        found = ax.get_legend_handles_labels()
        handles, labels = handles + found[0], labels + found[1]
    renderer = fig.canvas.get_renderer()
    room = fig.bbox.width - 2 * LEGEND_MARGIN * fig.dpi
    for columns in range(max(1, min(len(labels), LEGEND_COLUMNS)), 0, -1):  # a legend's columns are laid out when it is made
        legend = fig.legend(handles, labels, loc="outside lower center", ncol=columns, fontsize=8)
        if columns == 1 or legend.get_window_extent(renderer).width <= room:
            break
        legend.remove()
    box = legend.get_window_extent(renderer)
    fig.set_figwidth(max(fig.get_figwidth(), box.width / fig.dpi + 2 * LEGEND_MARGIN))
    fig.set_figheight(fig.get_figheight() + box.height / fig.dpi)


def grouped_bars(df, title: str, out: str | Path) -> Path:
    """One bar per row of `df` (a model) in each column's group; cells that are not numbers ("n/a") are not drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    df = df.apply(pd.to_numeric, errors="coerce").dropna(axis=1, how="all")
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(df.columns) + 2), 3.0), layout="constrained")  # the legend's height added
    width = 0.8 / max(1, len(df))
    for i, ((model, row), colour) in enumerate(zip(df.iterrows(), distinct_colours(len(df)), strict=True)):
        ax.bar([x + i * width for x in range(len(df.columns))], row.values, width, label=str(model), color=colour)
    ax.set_xticks([x + width * (len(df) - 1) / 2 for x in range(len(df.columns))])
    ax.set_xticklabels(df.columns, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("%")
    ax.set_title(title)
    _legend_below(fig)
    return _save(fig, out)


FIGURE_FORMATS = ("png", "pdf", "svg")


def axis_top(highest: float) -> float:
    """The top of a percent axis that shows `highest` (a bar or an interval's end) with room above it: 100 once values
    pass half of it, else the next of 1, 2, 5, 10, 20, 50 above 1.1 times it (retrieval's R@1 of a few % is not a
    sliver under an axis to 100)."""
    if not np.isfinite(highest) or highest * 1.1 > 50:
        return 100.0
    return next(top for top in (1, 2, 5, 10, 20, 50) if top >= highest * 1.1)


def split_bars(values, low, high, counts: dict[str, str], chance: dict[str, float], title: str, out: str | Path) -> Path:
    """A figure for a paper: per split (a column of `values`, in %), one bar per model (a row, named as given), its 95 %
    interval from `low` to `high` (same shape; NaN: none), the split's item count `counts[split]` under its name, and a
    dashed line at the split's chance level where `chance` knows it. A split no model ran is not drawn; a score of 0 is a
    bar of 0, labelled, not a gap. Written as PNG, PDF and SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    values = values.apply(pd.to_numeric, errors="coerce").dropna(axis=1, how="all")
    low, high = (f.reindex(index=values.index, columns=values.columns).apply(pd.to_numeric, errors="coerce") for f in (low, high))
    # a mean of one part (a family of one split, the overall of a one-split run) repeats that part's bar: drawn once
    columns = list(values.columns)
    means = [c for c in columns if low[c].isna().all() and high[c].isna().all()]
    repeats = [c for c in means if any(values[o].equals(values[c]) for o in columns[: columns.index(c)])]
    values, low, high = (f.drop(columns=repeats) for f in (values, low, high))
    models, splits = len(values), list(values.columns)
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(splits) + 2), 3.4), layout="constrained")  # the legend's height added
    width = 0.8 / max(1, models)
    for i, ((model, row), colour) in enumerate(zip(values.iterrows(), distinct_colours(models), strict=True)):
        xs = np.arange(len(splits)) + i * width
        ax.bar(xs, row.values, width, label=str(model), color=colour)
        known = (low.loc[model].notna() & high.loc[model].notna()).to_numpy()  # a family's mean of splits has no interval
        if known.any():
            below, above = (row - low.loc[model]).clip(lower=0), (high.loc[model] - row).clip(lower=0)
            ax.errorbar(xs[known], row.values[known], yerr=[below.values[known], above.values[known]], fmt="none", ecolor="black",
                        elinewidth=0.8, capsize=2)
        for x, v in zip(xs, row.values, strict=True):
            if v == 0:  # a real 0, not a split left out
                ax.annotate("0", (x, 0), ha="center", va="bottom", fontsize=7)
    for k, split in enumerate(splits):
        if split in chance:
            ax.hlines(100 * chance[split], k - width / 2, k + 0.8 - width / 2, colors="grey", linestyles="dashed", linewidth=1,
                      label="chance" if k == min(i for i, s in enumerate(splits) if s in chance) else None)
    ax.set_xticks(np.arange(len(splits)) + width * (models - 1) / 2)
    ax.set_xticklabels([f"{s}\nn={counts[s]}" if s in counts else s for s in splits], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("% (95 % interval)")
    lines = [100 * chance[s] for s in values.columns if s in chance]
    # a benchmark whose every cell is empty (no split has a number) draws no bar: the axis to 100, as `axis_top` gives for
    # no value, without numpy's "All-NaN axis" warning that `nanmax` of nothing but NaN prints
    tops = [top for top in (values.max().max(), high.max().max(), *lines) if np.isfinite(top)]
    ax.set_ylim(0, axis_top(max(tops, default=math.nan)))
    ax.set_title(title)
    _legend_below(fig)
    return _save(fig, out, FIGURE_FORMATS)


def _grid(weights: np.ndarray) -> np.ndarray:
    side = math.isqrt(weights.size)
    if side * side != weights.size:
        raise ValueError(f"{weights.size} visual tokens do not form a square grid")
    return weights.reshape(side, side)


def model_label(name: str) -> str:
    """A short panel label: a run's name and step for a checkpoint folder (`runs/x/c2lip/checkpoints/step_0000300`
    gives "c2lip step 300"), the last path part for other folders and files, the name itself otherwise."""
    from .models.checkpoint import RunFolder

    path = Path(name)
    step = RunFolder.step_number(path)
    if step is not None:
        return f"{RunFolder.holding(path).name} step {step}"
    return path.name if path.exists() else name


def attention_figure(image: Image.Image, maps: dict[str, np.ndarray], concept: str, out: str | Path) -> Path:
    """The image, each model's attention for `concept`, and with two models their difference
    (first minus second: more attention green, less violet).

    Attention is shown in multiples of uniform (weight × number of tokens: 1 is an even spread,
    4 a token with four times its share), so maps of models with different token counts compare,
    and every panel has its colour bar: a flat map reads as a flat 1, not as a rendering fault.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(maps)
    grids = {name: _grid(weights) * weights.size for name, weights in maps.items()}
    panels = 1 + len(names) + (len(names) == 2)
    fig, axes = plt.subplots(1, panels, figsize=(3.4 * panels, 3.9), layout="constrained")
    extent = (0, image.width, image.height, 0)
    axes[0].imshow(image)
    axes[0].set_title("image", fontsize=10)
    top = max(float(g.max()) for g in grids.values())  # one scale, so the models compare
    for ax, name in zip(axes[1 : 1 + len(names)], names, strict=True):
        ax.imshow(image, alpha=0.45, extent=extent)
        shown = ax.imshow(grids[name], cmap="inferno", vmin=0, vmax=top, alpha=0.6, extent=extent, interpolation="bilinear")
        ax.set_title(name, fontsize=10)
        fig.colorbar(shown, ax=ax, fraction=0.046, pad=0.03, label="× uniform")
    if len(names) == 2:
        diff = grids[names[0]] - grids[names[1]]
        bound = float(np.abs(diff).max()) or 1.0
        ax = axes[-1]
        ax.imshow(image, alpha=0.45, extent=extent)
        shown = ax.imshow(diff, cmap="PRGn", vmin=-bound, vmax=bound, alpha=0.7, extent=extent, interpolation="bilinear")
        ax.set_title(f"{names[0]} − {names[1]}", fontsize=10)
        fig.colorbar(shown, ax=ax, fraction=0.046, pad=0.03, label="difference, × uniform")
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"attention for “{concept}”", fontsize=11)
    return _save(fig, out)


def attention_comparison(image: str | Path, concept: str, models: list[tuple[str, str | None]], out: str | Path,
                         temperature: float | None = None) -> Path:
    """`compclip attention`: each (model, pretrained tag) model's cross-attention map of `concept` over the image,
    drawn side by side (with their difference for two models)."""
    from .data import decode_image
    from .errors import DataError
    from .methods.c2lip import concept_attention
    from .models import load_model

    try:
        picture = decode_image(image)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:  # the reader's corrupt_image, said at once
        raise DataError(f"{image}: not an image PIL can read ({type(e).__name__}: {e})") from None
    maps = {}
    for name, tag in models:
        net, preprocess, tokenizer = load_model(name, tag)
        label = model_label(name)
        label = label if label not in maps else f"{label} (2)"
        maps[label] = concept_attention(net, tokenizer, preprocess(picture).unsqueeze(0), concept, temperature)[0].numpy()
    side = min(picture.size)
    square = picture.crop(
        ((picture.width - side) // 2, (picture.height - side) // 2, (picture.width + side) // 2, (picture.height + side) // 2)
    )
    return attention_figure(square.resize((224, 224), Image.BICUBIC), maps, concept, out)


def binding_curve(curves: dict[str, list[tuple[float, float, float]]], knob: str, out: str | Path,
                  metric: str = "unseen swap-attribute accuracy (%)", chance: float | None = 50.0) -> Path:
    """One line per method through (knob value, mean), with its 95 % interval as error bars: how binding of unseen
    pairings moves with one property of the training data (the OC-CLIP paper's PUG figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 3.9), layout="constrained")
    for name, points in curves.items():
        x, mean, half = (np.array(column, dtype=float) for column in zip(*sorted(points), strict=True))
        ax.errorbar(x, mean, yerr=half, marker="o", capsize=3, label=name)
    if chance is not None:
        ax.axhline(chance, color="grey", linestyle=":", linewidth=1, label="chance")
    ax.set_xlabel(knob)
    ax.set_ylabel(metric)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, out)


def interval_bars(numbers: dict[str, dict[str, dict[str, list]]], columns: list[str], out: str | Path, title: str) -> Path:
    """Each model's mean with its 95 % interval per column, seen (solid) beside unseen (hatched), the legend below the
    axes: {model: {split: {column: one value per seed or world}}}; a column a model lacks ("n/a") is left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .stats import interval

    models = list(numbers)
    splits = sorted({s for by in numbers.values() for s in by}, key=lambda s: (s != "seen", s))
    colours = distinct_colours(len(models))
    width = 0.84 / (len(models) * len(splits))
    fig, ax = plt.subplots(figsize=(max(7.0, 1.25 * len(columns) + 1), 4.0), layout="constrained")  # the legend's height added
    for m, model in enumerate(models):
        for k, split in enumerate(splits):
            xs, means, halves = [], [], []
            for c, column in enumerate(columns):
                values = numbers[model].get(split, {}).get(column, [])
                if not values or any(isinstance(v, str) or v != v for v in values):
                    continue
                mean, half = interval(values)
                xs.append(c - 0.42 + (m * len(splits) + k + 0.5) * width)
                means.append(mean)
                halves.append(0.0 if half != half else half)
            ax.bar(xs, means, width, yerr=halves, capsize=2, color=colours[m], edgecolor="black", linewidth=0.4,
                   hatch="//" if k else None, alpha=0.55 if k else 0.95, label=f"{model}, {split}", error_kw={"linewidth": 0.8})
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels(columns, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("%")
    ax.set_ylim(0, 100)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(title, fontsize=10)
    _legend_below(fig)
    return _save(fig, out)
