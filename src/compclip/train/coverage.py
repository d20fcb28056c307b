"""Concept coverage: how many captions gave a concept method something to train on, counted step by step, and the
first step's share judged (logged, warned below 90 %, refused below --min-concept-coverage)."""
from __future__ import annotations

import logging
from typing import Any

from ..errors import DataError
from .config import TrainConfig

log = logging.getLogger("compclip.train")


class Coverage:
    """Counts of the captions whose concepts a concept method could use (`Method.collate`'s `coverage`), over the run."""

    def __init__(self):
        self.covered = self.total = self.steps = 0
        self.example = ""

    def add(self, micro: list[dict[str, Any]]) -> bool:
        """Count one step's micro-batches; False for a method without concepts."""
        if "coverage" not in micro[0]:
            return False
        for batch in micro:
            covered, total = batch["coverage"].tolist()
            self.covered, self.total = self.covered + covered, self.total + total
            self.example = self.example or batch["uncovered"]
        self.steps += 1
        return True

    @property
    def share(self) -> float:
        return self.covered / self.total if self.total else 1.0

    def record(self) -> dict[str, float]:
        return {"concept_coverage": self.share} if self.steps else {}


def check_coverage(cfg: TrainConfig, coverage: Coverage, is_main: bool) -> None:
    """After the first step's batches: the share of captions that gave the method concepts, logged; below 90 % a
    warning, below --min-concept-coverage a stop (a concept method that trains on nothing is another method)."""
    covered, total, share, example = coverage.covered, coverage.total, coverage.share, coverage.example
    where = f"the concept store {cfg.concepts}" if cfg.concepts else "the shards' concept records"
    text = f"{cfg.method}: {covered} of {total} captions of the first step have concepts it can use ({share:.1%}), from {where}"
    if share < cfg.min_concept_coverage:
        raise DataError(f"{text}, below --min-concept-coverage {cfg.min_concept_coverage}; e.g. {example!r} has none: run "
                        "`compclip concepts` over the training data (in span mode a phrase must also be found in the caption's "
                        "tokens)")
    if is_main:
        log.info("%s", text)
        if share < 0.9:
            log.warning("only %.1f%% of the captions have concepts, e.g. %r", 100 * share, example)
