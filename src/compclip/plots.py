"""Figures: concept attention maps over an image (C2LIP's Figure 2)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from PIL import Image


def _grid(weights: np.ndarray) -> np.ndarray:
    side = math.isqrt(weights.size)
    if side * side != weights.size:
        raise ValueError(f"{weights.size} visual tokens do not form a square grid")
    return weights.reshape(side, side)


def attention_figure(image: Image.Image, maps: dict[str, np.ndarray], concept: str, out: str | Path) -> Path:
    """The image, each model's attention for `concept`, and with two models their difference
    (first minus second: more attention green, less violet)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(maps)
    panels = 1 + len(names) + (len(names) == 2)
    fig, axes = plt.subplots(1, panels, figsize=(3.2 * panels, 3.4))
    extent = (0, image.width, image.height, 0)
    axes[0].imshow(image)
    axes[0].set_title("image")
    top = max(float(m.max()) for m in maps.values())  # one scale, so the models compare
    for ax, name in zip(axes[1 : 1 + len(names)], names, strict=True):
        ax.imshow(image, alpha=0.45, extent=extent)
        ax.imshow(_grid(maps[name]), cmap="inferno", vmin=0, vmax=top, alpha=0.6, extent=extent, interpolation="bilinear")
        ax.set_title(f"{name}\n“{concept}”", fontsize=9)
    if len(names) == 2:
        diff = _grid(maps[names[0]] - maps[names[1]])
        bound = float(np.abs(diff).max()) or 1.0
        ax = axes[-1]
        ax.imshow(image, alpha=0.45, extent=extent)
        shown = ax.imshow(diff, cmap="PRGn", vmin=-bound, vmax=bound, alpha=0.7, extent=extent, interpolation="bilinear")
        ax.set_title(f"{names[0]} − {names[1]}", fontsize=9)
        fig.colorbar(shown, ax=ax, fraction=0.046)
    for ax in axes:
        ax.axis("off")
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
