"""What every benchmark shares: the data root, missing-image accounting, the result record.

A benchmark reads its files from one data root (`--data-root` or `COMPCLIP_DATA`), asks the
run's `Scorer` for scores of image–text pairs, decides with `protocols`, and returns metrics. Examples
whose images are missing are left out *and reported*: the result is marked incomplete, with
the count and the first missing files, so nothing leaves the denominator silently.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DataError, MissingFileError, UsageError
from .scorer import Scorer

MISSING_EXAMPLES = 5
NOT_APPLICABLE = "n/a"  # a metric the model has no score for (SugarCrepe++ TOT without a text-to-text score)


def data_root(root: str | os.PathLike | None = None) -> Path:
    value = root or os.environ.get("COMPCLIP_DATA")
    if not value:
        raise UsageError("no data root: pass --data-root or set COMPCLIP_DATA")
    return Path(value)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MissingFileError(f"{path}: missing (see `compclip data check`)") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: unreadable JSON ({e})") from None


def read_jsonl(path: Path) -> list[Any]:
    """One JSON value per non-empty line; a bad line is an error naming the file and line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
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


@dataclass
class Missing:
    """Images a benchmark needed and did not find (each file once, in the order met)."""

    files: dict[str, None] = field(default_factory=dict)

    def keep(self, paths: list[Path]) -> bool:
        """True when every path exists; otherwise records the missing ones."""
        gone = [str(p) for p in paths if not p.is_file()]
        self.files.update(dict.fromkeys(gone))
        return not gone

    def report(self) -> dict[str, Any]:
        return {"count": len(self.files), "examples": list(self.files)[:MISSING_EXAMPLES]}


@dataclass
class Result:
    metrics: dict[str, Any]
    missing: Missing

    @property
    def complete(self) -> bool:
        return not self.missing.files


class Benchmark:
    """Subclasses set `name`, `task` (CLIP_benchmark's task name) and implement `required` and `run`."""

    name = ""
    task = ""

    def required(self, root: Path) -> list[Path]:
        """Annotation files the benchmark cannot run without (images are checked per example)."""
        raise NotImplementedError

    def run(self, scorer: Scorer, root: Path, ties: str) -> Result:
        raise NotImplementedError

    def images(self, root: Path) -> list[Path]:
        """Every image the benchmark reads (for `compclip data check`); folder-based ones list what is there."""
        return []

    def lacks(self, root: Path) -> list[Path]:
        return [p for p in self.required(root) if not p.exists()]


REGISTRY: dict[str, Benchmark] = {}


def register(cls: type[Benchmark]) -> type[Benchmark]:
    """Class decorator: make a benchmark available to `compclip eval --benchmark NAME`."""
    REGISTRY[cls.name] = cls()
    return cls


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def first_option_wins(scorer: Scorer, images: list[Path], options: list[list[str]], ties: str):
    """For each image, whether its first caption option beats the others; every (image, option) pair scored in one call."""
    import torch

    from . import protocols

    scores = scorer.pairs([image for image, opts in zip(images, options, strict=True) for _ in opts], [o for opts in options for o in opts])
    correct, start = [], 0
    for opts in options:
        correct.append(protocols.picks(scores[start : start + len(opts)][None], 0, ties)[0])
        start += len(opts)
    return torch.stack(correct) if correct else torch.zeros(0, dtype=torch.bool)


def accuracy(correct) -> dict[str, Any]:
    n = int(correct.numel())
    return {"acc": correct.float().mean().item() if n else float("nan"), "n": n}


