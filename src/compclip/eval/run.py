"""`compclip eval`: one model, several benchmarks, one encoder shared by all of them."""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import UsageError
from ..io import write_json
from .base import REGISTRY, data_root
from .encoder import Encoder

log = logging.getLogger("compclip.eval")


def resolve(names: str | list[str]) -> list[str]:
    names = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    unknown = [n for n in names if n not in REGISTRY]
    if unknown or not names:
        raise UsageError(f"unknown benchmarks {unknown or names}; known: {', '.join(sorted(REGISTRY))}")
    return names


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
) -> dict[str, dict[str, Any]]:
    """Run benchmarks and write `OUT/<benchmark>.json` (CLIP_benchmark's keys plus compclip's)."""
    from ..models import load_model

    names, root = resolve(benchmarks), data_root(data)
    net, preprocess, tokenizer = load_model(model, pretrained, device=device)
    encoder = Encoder(net, preprocess, tokenizer, device, batch_size, workers, cache_dir)
    records = {}
    for name in names:
        bench = REGISTRY[name]
        record: dict[str, Any] = {"dataset": name, "model": model, "pretrained": pretrained, "task": bench.task,
                                  "ties": ties, "compclip_version": __version__}
        lacks = bench.lacks(root)
        if lacks:
            log.error("%s: cannot run, missing %s (see `compclip data check`)", name, ", ".join(map(str, lacks)))
            record.update(metrics={}, complete=False, missing_files=[str(p) for p in lacks])
        else:
            start = time.perf_counter()
            result = bench.run(encoder, root, ties)
            record.update(metrics=result.metrics, complete=result.complete, missing_images=result.missing.report(),
                          seconds=round(time.perf_counter() - start, 3))
            if not result.complete:
                report = result.missing.report()
                log.warning("%s: %d images missing, e.g. %s: results cover the rest and are marked incomplete",
                            name, report["count"], ", ".join(report["examples"]))
        write_json(Path(out) / f"{name}.json", record)
        records[name] = record
    log.info("encoded %d images and %d captions", encoder.encoded["images"], encoder.encoded["texts"])
    return records
