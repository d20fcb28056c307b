"""A run folder has one owner, and a resumed run is the same run.

`RunLock` is an advisory lock (`flock`) on `OUT/.lock`, which holds the owner's host, pid and start time. The
kernel drops the lock when its process ends, however it ends, so a lock left by a killed run is taken over,
never waited on. `changed_options` compares the options that define a run with those of the checkpoint it
would resume.
"""
from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..io import storage_errors

LOCK_NAME = ".lock"
# The options that do not change what a run computes: how it is launched, logged and checkpointed.
NOT_DEFINING = frozenset({"out", "workers", "save_every", "keep", "log_every", "eval_every", "device", "grad_checkpointing",
                          "min_concept_coverage", "skip_nonfinite", "image_root", "resume", "report_to", "wandb_project_name",
                          "eval_benchmarks", "eval_data_root", "val_data", "keep_best", "torchcompile",
                          "dist_timeout"})


def latest_checkpoint(out: str | Path) -> Path | None:
    """The run's newest complete checkpoint, as OUT/checkpoints/latest names it (None before the first)."""
    pointer = Path(out) / "checkpoints" / "latest"
    return pointer.parent / pointer.read_text().strip() if pointer.is_file() else None


class RunLock:
    """Held from the run's start to its end by the process that writes the folder (rank 0)."""

    def __init__(self, out: Path):
        self.out, self.fd, self.created = out, None, not out.exists()

    def acquire(self) -> RunLock:
        path = self.out / LOCK_NAME
        with storage_errors(path):
            self.out.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 4096).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise UsageError(f"--out {self.out} is in use by another compclip train ({owner}): wait for it to finish, or "
                             "choose another --out") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"host {socket.gethostname()}, pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
        self.fd = fd
        os.register_at_fork(after_in_child=self._forget)  # a forked DataLoader worker must not keep the lock alive
        return self

    def _forget(self) -> None:
        """In a forked child: close its copy of the descriptor, so the lock dies with the process that took it."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def release(self, keep_folder: bool = True) -> None:
        """Unlock; with `keep_folder` False, a folder this run created and left without a checkpoint is removed."""
        if self.fd is None:
            return
        os.close(self.fd)
        self.fd = None
        if not keep_folder and self.created and not (self.out / "checkpoints").exists():
            for name in (LOCK_NAME, "train.log"):
                (self.out / name).unlink(missing_ok=True)
            if not any(self.out.iterdir()):
                self.out.rmdir()


def changed_options(saved: dict[str, Any], now: dict[str, Any], defaults: dict[str, Any] | None = None) -> list[str]:
    """`option old -> new` for each option that defines a run and differs between the two configurations. More steps
    continue a run whose learning rate is constant; under a cosine schedule they change every step's rate. An option
    newer than the saved run counts as its default there (`defaults`)."""
    out, defaults = [], defaults or {}
    for key in sorted(set(saved) | set(now)):
        if key in NOT_DEFINING or (key == "steps" and saved.get("schedule") == now.get("schedule") == "const"):
            continue
        old, new = saved.get(key, defaults.get(key)), now.get(key)
        if isinstance(old, list):  # JSON holds tuples as lists
            old = tuple(old)
        if isinstance(new, list):
            new = tuple(new)
        if old != new:
            out.append(f"{key} {old!r} -> {new!r}")
    return out
