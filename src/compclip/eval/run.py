"""`compclip eval`: one model, several benchmarks, one scorer shared by all of them."""
from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import MissingFileError, UsageError
from ..io import write_json
from ..precision import PRECISIONS
from . import protocols
from .base import REGISTRY, data_root
from .scorer import load_scorer

log = logging.getLogger("compclip.eval")


def resolve(names: str | list[str]) -> list[str]:
    names = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    unknown = [n for n in names if n not in REGISTRY]
    if unknown or not names:
        raise UsageError(f"unknown benchmarks {unknown or names}; known: {', '.join(sorted(REGISTRY))}")
    return names


def null_nans(metrics: dict[str, Any], prefix: str = "") -> tuple[dict[str, Any], list[str]]:
    """`metrics` with every NaN as None (strict JSON has no NaN), and the dotted paths of those metrics."""
    clean, nulls = {}, []
    for key, value in metrics.items():
        if isinstance(value, dict):
            clean[key], inner = null_nans(value, f"{prefix}{key}.")
            nulls += inner
        elif isinstance(value, float) and math.isnan(value):
            clean[key] = None
            nulls.append(f"{prefix}{key}")
        else:
            clean[key] = value
    return clean, nulls


def evaluated_nothing(record: dict[str, Any]) -> bool:
    """True when a result holds no score (scores are floats, counts ints): no example could be scored."""

    def scores(metrics: dict[str, Any]):
        for value in metrics.values():
            if isinstance(value, dict):
                yield from scores(value)
            elif isinstance(value, float):
                yield value

    return not any(True for _ in scores(record["metrics"]))


def check_options(benchmarks: str | list[str], out: str | Path, data: str | Path | None, ties: str, batch_size: int,
                  workers: int, precision: str) -> tuple[list[str], Path]:
    """Every option checked before a model is built or a file written: the benchmark names and the data root."""
    names, root = resolve(benchmarks), data_root(data)
    if not root.is_dir():
        raise MissingFileError(f"{root}: the data root is not a folder (--data-root or COMPCLIP_DATA)")
    if Path(out).exists() and not Path(out).is_dir():
        raise UsageError(f"--out {out} is a file; results go into a folder")
    protocols.check_ties(ties)
    if batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, not {batch_size}")
    if workers < 0:
        raise UsageError(f"--workers must be 0 or more, not {workers}")
    if precision not in PRECISIONS:
        raise UsageError(f"--precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    return names, root


def evaluate(
    model: str,
    benchmarks: str | list[str],
    out: str | Path,
    pretrained: str | None = None,
    data: str | Path | None = None,
    ties: str = "strict",
    batch_size: int = 64,
    workers: int = 2,
    cache_dir: str | Path | None = None,
    device: str = "cpu",
    precision: str | None = None,
) -> dict[str, dict[str, Any]]:
    """Run benchmarks and write `OUT/<benchmark>.json` (CLIP_benchmark's keys plus compclip's).

    `precision` fp32, amp_bf16 or amp (fp16); by default amp on a GPU, as CLIP_benchmark, and fp32
    on the CPU, where autocast is only faster on CPUs with bf16 units and moves the scores.
    """
    precision = precision or ("amp" if str(device).startswith("cuda") else "fp32")
    names, root = check_options(benchmarks, out, data, ties, batch_size, workers, precision)
    scorer = load_scorer(model, pretrained, device, batch_size, workers, cache_dir, precision)
    records = {}
    for name in names:
        bench = REGISTRY[name]
        record: dict[str, Any] = {"dataset": name, "model": model, "pretrained": pretrained, "task": bench.task,
                                  "ties": ties, "precision": precision, "compclip_version": __version__}
        lacks = bench.lacks(root)
        if lacks:
            log.error("%s: cannot run, missing %s (see `compclip data check`)", name, ", ".join(map(str, lacks)))
            record.update(metrics={}, complete=False, missing_files=[str(p) for p in lacks])
        else:
            start = time.perf_counter()
            result = bench.run(scorer, root, ties)
            metrics, nulls = null_nans(result.metrics)
            record.update(metrics=metrics, complete=result.complete, missing_images=result.missing.report(),
                          seconds=round(time.perf_counter() - start, 3))
            if nulls:
                record["null_metrics"] = {"metrics": nulls, "why": "no example could be scored: its images are missing "
                                          "(see missing_images) or the split has no examples"}
            if not result.complete:
                report = result.missing.report()
                log.warning("%s: %d images missing, e.g. %s: results cover the rest and are marked incomplete",
                            name, report["count"], ", ".join(report["examples"]))
        write_json(Path(out) / f"{name}.json", record)
        records[name] = record
    log.info("encoded %d images and %d captions", scorer.encoded["images"], scorer.encoded["texts"])
    return records
