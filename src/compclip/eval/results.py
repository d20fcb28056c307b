"""Result folders read back: each result JSON (checked), every score as one tidy table (`compclip.load_results`), every
scored item as another (`compclip.load_items`). What `report`, `compare` and the user's own notebook read."""
from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import DataError, MissingFileError, UsageError
from .items import COLUMNS as ITEM_COLUMNS
from .items import SUFFIX as ITEMS_SUFFIX
from .items import resolved_images

log = logging.getLogger(__name__)


def load_results(folders: list[str | Path]) -> dict[str, dict[str, dict[str, Any]]]:
    """{label: {benchmark: record}}; the label is the folder's name, or `parent/name` when names repeat."""
    results = {}
    for label, folder in folder_labels(folders).items():
        files = sorted(folder.glob("*.json"))
        if not files:
            raise MissingFileError(f"{folder}: no result files (<benchmark>.json)")
        results[label] = {f.stem: _read_result(f) for f in files}
    return results


def folder_labels(folders: list[str | Path]) -> dict[str, Path]:
    """Each results folder by its label: the `name=` its results were given (`compclip.evaluate`), else the folder's
    name, or `parent/name` when names repeat; each checked once."""
    folders = [Path(f) for f in folders]
    twice = next((f for i, f in enumerate(folders) if f.resolve() in {g.resolve() for g in folders[:i]}), None)
    if twice is not None:
        raise UsageError(f"{twice}: given twice; a report has one row per results folder")
    for folder in folders:
        if not folder.is_dir():
            raise MissingFileError(f"{folder}: {'a file' if folder.exists() else 'no such folder'}; give the folders that "
                                   "`compclip eval --out` wrote, one per model")
    names = [given_name(f) or f.name for f in folders]
    return {n if names.count(n) == 1 else f"{f.parent.name}/{f.name}": f for n, f in zip(names, folders, strict=True)}


def given_name(folder: Path) -> str | None:
    """The model's name its results record (`compclip.evaluate(name=)`), where every result file in `folder` names the
    same one; None for `compclip eval`'s results, named by their folder."""
    found = set()
    for file in folder.glob("*.json"):
        try:
            found.add(json.loads(file.read_text(encoding="utf-8")).get("name"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            return None  # (`_read_result` names the file that is not a result)
    return found.pop() if len(found) == 1 and None not in found else None


def items_frame(folders: str | Path | list[str | Path], data_root: str | Path | None = None) -> pd.DataFrame:
    """Every scored item of result folders as one DataFrame: model (the folder's label), benchmark (the result file's
    name), then the item's columns (`compclip.eval.items`); a benchmark's own columns are empty for the others'. Each
    image is a path that opens from here: under the data root its result records, or under `data_root` where the data
    has moved since."""
    frames, unrooted = [], []
    for label, folder in folder_labels([folders] if isinstance(folders, (str, Path)) else list(folders)).items():
        for file in sorted(folder.glob(f"*{ITEMS_SUFFIX}")):
            try:
                frame = pd.read_parquet(file)
            except (OSError, ValueError) as e:
                raise DataError(f"{file}: not a readable items file ({type(e).__name__}: {e}); run `compclip eval` again for "
                                "it") from None
            check_items(file, frame)
            result = file.with_name(file.name.removesuffix(ITEMS_SUFFIX) + ".json")
            root = recorded_root(result)
            unrooted += [result] if root is None else []
            frame = resolved_images(frame, root, None if data_root is None else Path(data_root))
            frames.append(frame.assign(model=label, benchmark=file.name.removesuffix(ITEMS_SUFFIX)))
    if data_root is not None and unrooted:
        _say_unrooted(unrooted, data_root)
    if not frames:
        raise MissingFileError(f"{folders}: no items files (<benchmark>{ITEMS_SUFFIX}): results written by an older compclip; run "
                               "`compclip eval` again")
    table = pd.concat(frames, ignore_index=True)
    return table[["model", "benchmark", *[c for c in table.columns if c not in ("model", "benchmark")]]]


def _say_unrooted(results: list[Path], data_root: str | Path) -> None:
    """One warning for the results `--data-root` cannot re-root: an older compclip's record no data root, and their items
    name each image as that run found it, so the report shows them there, whatever the data root given."""
    log.warning("--data-root %s: %d result(s) record no data root (written by an older compclip, e.g. %s): their images are "
                "shown where that run found them; run `compclip eval` again to write results the data root applies to",
                data_root, len(results), results[0])


def recorded_root(result: Path) -> str | None:
    """The data root a result file records (`data_root`), or None: a result of an older compclip, whose items name their
    images as the run found them (`_read_result` names a result file that does not read)."""
    try:
        root = json.loads(result.read_text(encoding="utf-8")).get("data_root")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    return root if isinstance(root, str) and root else None


def check_items(file: Path, frame: pd.DataFrame) -> None:
    """An items file as `compclip eval` writes it, or one line naming the file and what is wrong: every leading column
    (`compclip.eval.items.COLUMNS`), and verdicts that are true or false."""
    missing = [c for c in ITEM_COLUMNS if c not in frame.columns]
    if missing:
        raise DataError(f"{file}: not an items file of compclip eval: no column {', '.join(missing)}")
    verdicts = frame["correct"]
    if not (pd.api.types.is_bool_dtype(verdicts) or (pd.api.types.is_numeric_dtype(verdicts) and verdicts.isin([0, 1]).all())):
        bad = next(v for v in verdicts if not isinstance(v, (bool, int, float)) or v not in (0, 1))
        raise DataError(f"{file}: column correct holds {bad!r}, not true or false: not an items file of compclip eval")


def results_frame(folders: str | Path | list[str | Path]) -> pd.DataFrame:
    """Result folders as one tidy table, a row per score: model (the folder's label, as `report` names it), benchmark
    (the benchmark's name: `sugarcrepe` for a run of `sugarcrepe/swap_att` too), split (the metric's path, `/`-joined; ""
    for a benchmark's totals), metric, value (None where nothing could be scored) and n (the examples behind it, where
    the result names them). Counts such as `classes` and texts such as a layout are fields, not scores, and give no row."""
    rows = []
    for label, records in load_results([folders] if isinstance(folders, (str, Path)) else list(folders)).items():
        for stem, record in records.items():
            benchmark = str(record.get("dataset") or stem).split("/")[0]  # a one-split run's rows beside its benchmark's
            rows += [(label, benchmark, *row) for row in _scores(record["metrics"], ())]
    return pd.DataFrame(rows, columns=["model", "benchmark", "split", "metric", "value", "n"]).astype({"n": "Int64"})


def _scores(metrics: dict[str, Any], path: tuple[str, ...]) -> Iterator[tuple[str, str, float | None, int | None]]:
    n = metrics.get("n") if isinstance(metrics.get("n"), int) else None
    flat = flat_copies(metrics) if not path else set()
    for key, value in metrics.items():
        if isinstance(value, dict):
            yield from _scores(value, (*path, key))
        elif (value is None or isinstance(value, float)) and key not in flat:  # a split's flat copy is its split's row
            yield "/".join(path), key, value, n


def _read_result(file: Path) -> dict[str, Any]:
    """A result file as `compclip eval` writes it, refused in one line naming the file and the value when it does not
    parse, is not a result, or holds a score outside [0, 1] (a percentage, or another tool's scale: the tables would
    multiply it by 100)."""
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{file}: not a readable result ({type(e).__name__}: {e}); run `compclip eval` again for it, or "
                        "move it out of the folder") from None
    if not isinstance(record, dict) or not isinstance(record.get("metrics"), dict):
        raise DataError(f"{file}: not a `compclip eval` result (no \"metrics\" object); move it out of the folder")

    def scores(metrics: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
        for key, value in metrics.items():
            if isinstance(value, dict):
                yield from scores(value, f"{prefix}{key}.")
            elif isinstance(value, float):
                yield f"{prefix}{key}", value

    bad = [(key, value) for key, value in scores(record["metrics"]) if not 0 <= value <= 1]
    if bad:
        key, value = bad[0]
        raise DataError(f"{file}: metrics.{key} is {value}, outside [0, 1] (a score is a fraction; {len(bad)} such)")
    return record


def flat_copies(metrics: dict[str, Any]) -> set[str]:
    """The top-level keys that repeat a split's numbers flat (`swap_att_acc`, `compclip eval` writes them for
    CLIP_benchmark): a table counts each number once, under its split."""
    return {f"{split}_{key}" for split, inner in metrics.items() if isinstance(inner, dict) for key in inner}
