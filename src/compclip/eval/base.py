"""What every benchmark shares: the data root, its official layout, missing-image accounting, the result record.

A benchmark reads the files its official source hands a user, unpacked as that source says, under one data
root (`--data-root` or `COMPCLIP_DATA`); asks the run's `Scorer` for scores; decides with `protocols` by the
benchmark's own rule; and returns metrics. Nothing leaves a result silently: examples whose images are missing
are counted and named (`Missing`), and a file, subset or column of the official layout that is absent or
unreadable is named in `Result.absent`; either marks the result incomplete.
"""
from __future__ import annotations

import contextlib
import csv
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..data.images import ImageRef, image_ref
from ..errors import DataError, MissingFileError, UsageError
from ..options import NoOptions
from ..plugins import Registry
from .download import COCO, Asset

if TYPE_CHECKING:
    from ..scoring import Image, Scorer

MISSING_EXAMPLES = 5
NOT_APPLICABLE = "n/a"  # a metric the model has no score for (SugarCrepe++ TOT without a text-to-text score)


_READING: ContextVar[set[Path] | None] = ContextVar("files_read", default=None)


@contextlib.contextmanager
def files_read() -> Iterator[set[Path]]:
    """The data files (annotations, Parquet shards) a benchmark reads inside the block, as its readers note them
    (`noted`): a result records their SHA-256, so that a copy of a benchmark is told from its official release. Image
    files are not among them: a benchmark reads thousands."""
    found: set[Path] = set()
    token = _READING.set(found)
    try:
        yield found
    finally:
        _READING.reset(token)


def noted(path: Path) -> Path:
    """`path`, noted among the files read where a `files_read` block is open."""
    found = _READING.get()
    if found is not None:
        found.add(Path(path))
    return path


def data_root(root: str | os.PathLike | None = None) -> Path:
    value = root or os.environ.get("COMPCLIP_DATA")
    if not value:
        raise UsageError("no data root: pass --data-root or set COMPCLIP_DATA")
    return Path(value)


def read_json(path: Path) -> Any:
    try:
        return json.loads(noted(path).read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise MissingFileError(f"{path}: missing (see `compclip data check`)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: unreadable JSON ({e})") from None


def json_records(path: Path, what: str, shape: type = list) -> Any:
    """The records of an official JSON file that holds them in one `shape` (a list; an object keyed by record id): a file
    of another shape is one `DataError` naming it, what it holds, and `what` the release's file is."""
    found = read_json(path)
    if not isinstance(found, shape):
        raise DataError(f"{path}: a JSON {type(found).__name__}, not {what}")
    return found


def well_formed(found: Iterable[tuple[Any, Any]], problem: Callable[[Any], str | None], malformed: Malformed, place: str,
                subset: str | None = None) -> Iterator[tuple[Any, Any]]:
    """Each (index or key, record) of `found` in which `problem` finds nothing wrong; each other record skipped and named
    in `malformed` by `place` (its file, with its subset where it has one) and its index or key, so a benchmark scores
    fewer records than its file holds only by saying which and why."""
    for key, record in found:
        why = problem(record)
        if why:
            malformed.skip(place, key, why, subset)
        else:
            yield key, record


def read_jsonl(path: Path) -> list[Any]:
    """One JSON value per non-empty line; a bad line is an error naming the file and line."""
    try:
        lines = noted(path).read_text(encoding="utf-8-sig").splitlines()
    except FileNotFoundError:
        raise MissingFileError(f"{path}: missing (see `compclip data check`)") from None
    records = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{number}: unreadable JSON ({e})") from None
    return records


def read_parquet(files: list[Path], columns: tuple[str, ...], images: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The rows of Hub Parquet shards, in file and row order, with `columns`; each column of `images` (a Hub Image
    feature: a struct of `bytes` and `path`) as an `ImageRef` naming its shard, row and column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for file in files:
        try:
            table = pq.read_table(noted(file))
        except (pa.ArrowInvalid, OSError) as e:
            raise DataError(f"{file}: unreadable Parquet ({e})") from None
        lacking = [c for c in (*columns, *images) if c not in table.column_names]
        if lacking:
            raise DataError(f"{file}: no column {', '.join(lacking)} (columns: {', '.join(table.column_names)})")
        for i, row in enumerate(table.select([*columns, *images]).to_pylist()):
            for column in images:
                cell = row[column]
                data = cell.get("bytes") if isinstance(cell, dict) else cell
                row[column] = ImageRef(file, f"row {i}, {column}", data if isinstance(data, bytes) else None)
            rows.append(row)
    return rows


def read_csv(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str] | None, str | None]]:
    """The rows of an official CSV file as pandas' `read_csv` reads them (a field of any length, a quoted field may span
    lines), each (line number, row, None), or (line number, row, why) for a row not of the file's format: more or fewer
    fields than the header (a field the row lacks is None), bytes that are not UTF-8, or its quoting malformed (the row
    None). A file without `columns`, or with a quote that never closes (every row after it would be lost), is a
    `DataError`."""
    from ..data.table import open_table, table_rows

    try:
        with open_table(noted(path)) as f:
            header = next(csv.reader([f.readline()]), [])
    except FileNotFoundError:
        raise MissingFileError(f"{path}: missing (see `compclip data check`)") from None
    lacking = [c for c in columns if c not in header]
    if lacking:
        raise DataError(f"{path}: no column {', '.join(lacking)} (columns: {', '.join(header)})")
    for line, row, malformed in table_rows(path, ","):
        yield line, row, malformed or _row_problem(row, len(header))


def _row_problem(row: dict, width: int) -> str | None:
    """Why a row is not of `width` fields, all UTF-8, or None."""
    if None in row:  # csv.DictReader's key for the fields past the header's
        return f"{width + len(row[None])} fields, the header has {width}: a field holds an unquoted comma"
    cut = [k for k, v in row.items() if v is None]
    if cut:
        return f"{width - len(cut)} fields, the header has {width} (no {', '.join(cut)}): the row is cut short"
    for key, value in row.items():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a byte the file's reading escaped: not UTF-8
            return f"{key} holds bytes that are not UTF-8 (the file is read as UTF-8, as the release writes it)"
    return None


@dataclass
class Missing:
    """Images a benchmark needed and could not score, each once in the order met: not there, or (from the scorer's
    `unreadable`) there but not decodable, with why."""

    files: dict[str, str] = field(default_factory=dict)
    unreadable: Mapping[str, str] = field(default_factory=dict)
    present: dict[str, bool] = field(default_factory=dict, repr=False)  # each image looked for once (an image serves many items)

    @classmethod
    def of(cls, scorer: Scorer) -> Missing:
        """For a benchmark run with `scorer`: the images it found undecodable count as missing too."""
        return cls(unreadable=getattr(scorer, "unreadable", {}))

    def keep(self, images: list[Image]) -> bool:
        """True when every image is there and decodable; otherwise records the others."""
        refs = [image_ref(i) for i in images]
        for r in refs:
            if r.key not in self.present:
                self.present[r.key] = r.present()
        gone = {r.key: "not found" for r in refs if not self.present[r.key]}
        gone.update({r.key: f"unreadable: {self.unreadable[r.key]}" for r in refs if r.key in self.unreadable})
        for key, why in gone.items():
            self.files.setdefault(key, why)
        return not gone

    def as_record(self) -> dict[str, Any]:
        """The result JSON's `missing_images`: how many, how many of them unreadable, the first few named."""
        unreadable = [k for k, why in self.files.items() if why != "not found"]
        examples = [k if self.files[k] == "not found" else f"{k} ({self.files[k]})" for k in list(self.files)[:MISSING_EXAMPLES]]
        return {"count": len(self.files), "unreadable": len(unreadable), "examples": examples}


@dataclass
class Malformed:
    """Records of an official file that are not of its format (a field absent, of another type, out of range): each
    skipped before scoring and named in `Result.absent` by its file, subset and record, so that a result never counts
    fewer items than the file holds without saying which and why. The first few of a file and subset are named one by
    one, the others counted."""

    found: dict[str, list[tuple[str, str, str | None]]] = field(default_factory=dict)  # place: (record, why, its subset)

    def skip(self, place: str, record: Any, why: str, subset: str | None = None) -> None:
        """Record `record` of `place` (a file, with its subset where it has one) is skipped because `why`; `subset`
        None where the record's subset cannot be told (it is then named in every run)."""
        self.found.setdefault(place, []).append((str(record), why, subset))

    def named(self, asked: tuple[str, ...] = ()) -> dict[str, str]:
        """`Result.absent`'s entries for the records of the subsets `asked` (all: every record) and those of no subset."""
        absent = {}
        for place, skipped in self.found.items():
            mine = [(record, why) for record, why, subset in skipped if not asked or subset is None or subset in asked]
            for record, why in mine[:MISSING_EXAMPLES]:
                absent[f"{place} record {record}"] = f"malformed, skipped: {why}"
            if len(mine) > MISSING_EXAMPLES:
                absent[f"{place} records"] = f"{len(mine) - MISSING_EXAMPLES} more malformed records skipped"
        return absent


def text_problem(record: Mapping[str, Any], key: str) -> str | None:
    """Why `record[key]` is not a text of the official format (absent, another type, empty), or None."""
    if key not in record:
        return f"no {key}"
    value = record[key]
    if not isinstance(value, str):
        return f"{key} is {value!r}, not a text"
    return None if value.strip() else f"{key} is empty"


def integer_problem(record: Mapping[str, Any], key: str, below: int) -> str | None:
    """Why `record[key]` is not a whole number from 0 up to `below` (a JSON number, not a text or a boolean), or None."""
    if key not in record:
        return f"no {key}"
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{key} is {value!r}, not a whole number"
    return None if 0 <= value < below else f"{key} is {value}, not from 0 to {below - 1}"


@dataclass
class Result:
    metrics: dict[str, Any]
    missing: Missing
    absent: dict[str, str] = field(default_factory=dict)  # a file, subset or column of the official layout: why it is not scored
    items: list[dict[str, Any]] = field(default_factory=list)  # one row per scored item (`eval.items`)

    @property
    def complete(self) -> bool:
        return not self.missing.files and not self.absent


class Benchmark:
    """One benchmark. Subclasses set the class attributes and implement `lacks` and `run`.

    - `name`, `task` (CLIP_benchmark's task name);
    - `ties`: the official tie rule (`protocols.TIES`), applied under `--ties official`;
    - `splits`: the parts `--benchmark NAME/SPLIT` selects (none: the benchmark runs whole);
    - `Options`: the benchmark's declared options (`compclip.options`), set with `--bench-opt NAME.KEY=VALUE`;
    - `layout`: one line saying what the official download is and where it goes under the data root;
    - `misplaced`: paths under the data root that show a download put in the wrong place, each with the fix;
    - `assets`: the official files `compclip data download NAME` fetches, each with its pinned SHA-256 (none: the
      source publishes no checksum, or the files are not ours to fetch);
    - `columns`: the report's columns this benchmark fills, each (header, the metric's path in its result);
    - `kind`, `kind_of(split)`: the kind of change the false captions make (attribute, object, relation, spatial,
      counting, negation) where the
      benchmark's authors sort them so, for the error gallery's filter: `kind` for the whole benchmark, `kind_of` a
      split's where the splits differ (default: `kind`; None: the gallery reads it from the words);
    - `spectrum`, `spectrum_parts(metrics)`: the column of the field's widest sweep (Oh et al. 2024, ytaek-oh/vl_compo's
      `results.csv`) this benchmark fills, and the parts that column averages unweighted, read from this benchmark's
      metrics (None for a part not scored); several benchmarks may feed one column (ARO's three);
    - `verdict`: what an item's `correct` measures, which `compclip compare` names in each row (an accuracy, unless a
      benchmark scores several ways and its items carry one of them: SugarCrepe++'s ITT, Winoground's group score);
    - `departures(options, ties, pretrained, splits)`: how a run scores otherwise than the official code;
    - `release(paths)`, `items_read(metrics, paths)`: the official files a result's metrics at `paths` are scored from,
      with their published SHA-256 and item counts, and how many items the result read for them, which `report --paper`
      holds a result's recorded `files` against.
    """

    name = ""
    task = ""
    ties = "strict"
    splits: tuple[str, ...] = ()
    Options: type = NoOptions
    layout = ""
    misplaced: tuple[tuple[str, str], ...] = ()
    assets: tuple[Asset, ...] = ()
    columns: tuple[tuple[str, tuple[str, ...]], ...] = ()
    kind: str | None = None
    verdict = "accuracy"
    spectrum = ""

    def lacks(self, root: Path, splits: tuple[str, ...]) -> str | None:
        """None when the benchmark can run on `root`; otherwise one line naming what was looked for and where."""
        raise NotImplementedError

    def kind_of(self, split: str) -> str | None:
        return self.kind

    def spectrum_parts(self, metrics: dict[str, Any]) -> list[float | None]:
        return []

    def run(self, scorer: Scorer, root: Path, ties: str, splits: tuple[str, ...] = (), options: Any = None) -> Result:
        """Score `splits` (all of them when empty) under the tie rule `ties`, with `options` (None: the defaults)."""
        raise NotImplementedError

    def departures(self, options: Any, ties: str, pretrained: str, splits: tuple[str, ...]) -> list[str]:
        """Each way a run with `options`, the tie rule `ties`, on a model of the pretraining tag `pretrained` ("" where
        none is known), scores `splits` (all when empty) otherwise than the official code, one sentence each: a user
        reproducing a paper's column must see it, so the run warns of it, its result records it under `departures`, and
        `report --paper` marks the column ≠. None by default."""
        return []

    def release(self, paths: tuple[str, ...]) -> dict[str, tuple[str, int | None]]:
        """The official files (relative to the data root) that the metrics at `paths` ("swap_att", "add",
        "replace_att.itt") are scored from, each with its published SHA-256 and its number of items (None: not known).
        Default: every file `compclip data download` fetches unpacked (`assets`), counts not known."""
        return {asset.path: (asset.sha256, None) for asset in self.assets if asset.unzip_to is None}

    def items_read(self, metrics: dict[str, Any], paths: tuple[str, ...]) -> int | None:
        """How many items of the files `release(paths)` names a result of these `metrics` read; None: not known."""
        return None

    def images(self, root: Path) -> list[Image]:
        """Every image the benchmark reads (for `compclip data check`); folder-based ones list what is there."""
        return []

    def missing_files(self, root: Path, files: list[Path]) -> str | None:
        """The usual `lacks`: the files not there, named with the official layout."""
        gone = [str(f) for f in files if not f.exists()]
        return self.not_found(root, f"looked for {', '.join(gone)}: not there") if gone else None

    def not_found(self, root: Path, looked: str) -> str:
        """`looked` ("looked for X: not there"), what the root shows was misplaced, and the official layout, in one line."""
        found = [f"found {root / path}: {fix}" for path, fix in self.misplaced if (root / path).exists()]
        return ". ".join([looked, *found, self.layout])


REGISTRY: Registry[Benchmark] = Registry("benchmark", f"{__package__}.benchmarks", "compclip.benchmarks")


def register(cls: type[Benchmark]) -> type[Benchmark]:
    """Class decorator: make a benchmark available to `compclip eval --benchmark NAME`."""
    REGISTRY.register(cls.name, cls())
    return cls


def downloads() -> dict[str, list[Asset]]:
    """What `compclip data download NAME` fetches: each benchmark's own files, and the COCO ones several benchmarks share."""
    return {**COCO, **{name: list(bench.assets) for name, bench in REGISTRY.items() if bench.assets}}


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def acc_of(metrics: dict[str, Any], key: str, figure: str = "acc") -> float | None:
    """`metrics[key]`'s `figure` (a split's dict) or the value itself (a figure stored bare), None where not scored."""
    value = metrics.get(key)
    value = value.get(figure) if isinstance(value, dict) else value
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def mean_present(values) -> float:
    """The mean of the values that are scores: a part with nothing scored (NaN) is left out, as its absence is named."""
    return mean(v for v in values if not math.isnan(v))


def first_option_wins(scorer: Scorer, images: list[Image], options: list[list[str]], ties: str):
    """For each image, whether its first caption option beats the others, and its options' scores; every (image, option)
    pair scored in one call."""
    import torch

    from . import protocols

    scores = scorer.pairs([image for image, opts in zip(images, options, strict=True) for _ in opts], [o for opts in options for o in opts])
    correct, each, start = [], [], 0
    for opts in options:
        each.append(scores[start : start + len(opts)])
        correct.append(protocols.picks(each[-1][None], 0, ties)[0])
        start += len(opts)
    return (torch.stack(correct) if correct else torch.zeros(0, dtype=torch.bool)), [s.tolist() for s in each]


def rate(correct) -> float:
    """The share of right answers, as the count over the total (NaN for none), exact rather than a float32 mean."""
    n = int(correct.numel())
    return int(correct.sum()) / n if n else float("nan")


def accuracy(correct) -> dict[str, Any]:
    return {"acc": rate(correct), "n": int(correct.numel())}


def grouped(correct, groups: list[str], keep=lambda n: True) -> dict[str, dict[str, Any]]:
    """`accuracy` per group label (sorted), of the groups whose size `keep` accepts."""
    import torch

    out = {}
    for label in sorted(set(groups)):
        mask = torch.tensor([g == label for g in groups], dtype=torch.bool)
        if keep(int(mask.sum())):
            out[label] = accuracy(correct[mask])
    return out
