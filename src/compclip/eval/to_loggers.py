"""`compclip eval --report-to`: an evaluation's results where users compare runs. TensorBoard gets every number (flat, as
`<result>/<metric>`) and each benchmark's figure; W&B gets the same and a table of the items the model got wrong,
each with its image, so a person can look through them where they look at their runs."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..loggers import tensorboard_writer, wandb_run
from .gallery import SHOWN
from .items import SUFFIX
from .report import chance_levels, split_intervals, split_tables
from .results import items_frame

WRONG_COLUMNS = ("benchmark", "split", "item", "image", "true", "false", "score_true", "score_false")


def log_results(records: dict[str, dict[str, Any]], out: Path, reporters: list[str], project: str) -> None:
    """Log `records` (`compclip eval`'s, written into `out`) with the figures drawn into OUT/figures."""
    from ..plots import split_bars

    model = next(iter(records.values()))["model"]
    results = {model: {label.replace("/", "-"): record for label, record in records.items()}}
    items = items_frame(out) if any(out.glob(f"*{SUFFIX}")) else None
    figures = {}
    for bench, table in split_tables(results).items():
        low, high, counts = split_intervals(results, bench, table)
        figures[bench] = split_bars(table, low, high, counts, chance_levels(items, bench), bench, out / "figures" / f"{bench}.png")
    scalars = {f"{bench}/{key}": value for bench, record in results[model].items() for key, value in record["metrics"].items()
               if isinstance(value, (int, float)) and not isinstance(value, bool)}
    if "tensorboard" in reporters:
        _tensorboard(out, scalars, figures)
    if "wandb" in reporters:
        _wandb(out, project, model, scalars, figures, items)


def _tensorboard(out: Path, scalars: dict[str, float], figures: dict[str, Path]) -> None:
    import numpy as np
    from PIL import Image

    writer = tensorboard_writer(out)
    try:
        for key, value in scalars.items():
            writer.add_scalar(key, value, 0)
        for bench, png in figures.items():
            writer.add_image(f"{bench}/figure", np.asarray(Image.open(png).convert("RGB")), 0, dataformats="HWC")
    finally:
        writer.close()


def _wandb(out: Path, project: str, model: str, scalars: dict[str, float], figures: dict[str, Path], items) -> None:
    import wandb

    run = wandb_run(out, {"model": model, "results": sorted({k.split("/")[0] for k in scalars})}, project)
    try:
        logged: dict[str, Any] = {**scalars, **{f"{bench}/figure": wandb.Image(str(png)) for bench, png in figures.items()}}
        if items is not None:
            wrong = items[~items["correct"].astype(bool)].groupby(["benchmark", "split"], group_keys=False).head(SHOWN)
            table = wandb.Table(columns=list(WRONG_COLUMNS))
            for row in wrong.itertuples(index=False):
                image = wandb.Image(row.image) if Path(row.image).is_file() else None
                table.add_data(row.benchmark, row.split, row.item, image, row.true, row.false, row.score_true, row.score_false)
            logged["wrong_items"] = table
        run.log(logged, step=0)
    finally:
        run.finish()
