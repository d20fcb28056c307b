"""Counting what a reader skips, across DataLoader worker processes.

Counts live in a shared-memory tensor with one row per process (main + workers), so each
row has a single writer and the totals read in the main process are exact.
"""
from __future__ import annotations

import logging
from typing import Any

import torch
from torch.utils.data import get_worker_info

from ..errors import UsageError

REASONS = ("missing_image", "corrupt_image", "image_too_large", "empty_caption", "undecodable_text", "bad_record", "not_admitted")
MAX_WORKERS = 64
EXAMPLES_PER_REASON = 3  # logged per process, with file and record

log = logging.getLogger("compclip.data")


class SkipCounter:
    """Counts samples read and records skipped, by reason; logs the first examples of each."""

    def __init__(self, name: str):
        self.name = name
        self._counts = torch.zeros(MAX_WORKERS + 1, len(REASONS) + 1, dtype=torch.int64).share_memory_()
        self._logged: dict[str, int] = {}  # examples logged by reason
        self._passes = 0  # passes this process began: examples are named in the first, when the processes read disjoint rows
        self._warned: set[str] = set()  # summaries said as warnings: the same totals next epoch are no news

    def _row(self) -> int:
        info = get_worker_info()
        if info is None:
            return 0
        if info.id >= MAX_WORKERS:
            raise UsageError(f"at most {MAX_WORKERS} DataLoader workers are supported: lower --workers")
        return info.id + 1

    def reset(self) -> None:
        """A new pass: this process's counts start again. Examples are named in a process's first pass only: later
        passes meet the same bad rows, in another worker where the workers' parts rotate."""
        self._counts[self._row()].zero_()
        self._passes += 1

    def ok(self) -> None:
        self._counts[self._row(), -1] += 1

    def samples(self) -> int:
        """Samples this process has read in this pass."""
        return int(self._counts[self._row(), -1])

    def judged(self) -> int:
        """Records this process has read or skipped in this pass."""
        return int(self._counts[self._row()].sum())

    def skip(self, reason: str, where: str, detail: Any = "") -> None:
        self._counts[self._row(), REASONS.index(reason)] += 1
        if self._passes > 1:
            return
        seen = self._logged.get(reason, 0)
        if seen < EXAMPLES_PER_REASON:
            log.warning("%s: skipped %s: %s%s", self.name, reason.replace("_", " "), where, f" ({detail})" if detail else "")
        elif seen == EXAMPLES_PER_REASON:
            log.warning("%s: more %s skips follow; counted, not logged", self.name, reason.replace("_", " "))
        self._logged[reason] = seen + 1

    def stats(self) -> dict[str, int]:
        """Totals over every process: `read` samples and each skip reason."""
        total = self._counts.sum(0).tolist()
        return {"read": total[-1], **dict(zip(REASONS, total[:-1], strict=True)), "skipped": sum(total[:-1])}

    def summary(self, row_only: bool = False) -> str:
        counts = self._counts[self._row()].tolist() if row_only else self._counts.sum(0).tolist()
        read, skipped = counts[-1], sum(counts[:-1])
        if not skipped:
            return f"{self.name}: read {read} samples, skipped none"
        parts = ", ".join(f"{n} {r.replace('_', ' ')}" for r, n in zip(REASONS, counts[:-1], strict=True) if n)
        return f"{self.name}: read {read} samples, skipped {skipped} ({parts})"

    def _say(self, text: str, skipped: bool, otherwise) -> None:
        """A summary that counts skips is a warning the first time it is said; the same again (the next epoch reads the
        same data) goes to `otherwise`."""
        if skipped and text not in self._warned:
            self._warned.add(text)
            log.warning("%s", text)
        else:
            otherwise("%s", text)

    def log_summary(self) -> None:
        """Log the totals; call it in the main process once the loop is over."""
        self._say(self.summary(), bool(self.stats()["skipped"]), log.info)

    def log_pass_summary(self) -> None:
        """Log this process's share at the end of one pass. In a DataLoader worker a debug line: the pass's total follows
        from the main process (`log_summary`), and a log should not carry a line per worker per epoch."""
        info = get_worker_info()
        if info is not None:
            log.debug("[worker %d/%d] %s", info.id, info.num_workers, self.summary(row_only=True))
            return
        self._say(self.summary(row_only=True), bool(self._counts[self._row(), :-1].sum()), log.debug)
