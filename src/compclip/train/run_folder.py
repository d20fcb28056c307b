"""A run folder has one owner, and a resumed run is the same run.

`RunLock` is an advisory lock (`flock`) on `OUT/.lock`, which holds the owner's host, pid and start time. The
kernel drops the lock when its process ends, however it ends, so a lock left by a killed run is taken over,
never waited on. `changed_options` compares the options that define a run with those of the checkpoint it
would resume.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..io import FolderLock, refuse_links
from ..models.checkpoint import RunFolder, checkpoint_folder

LOCK_NAME = ".lock"
# The options that do not change what a run computes: how it is launched, logged and checkpointed.
NOT_DEFINING = frozenset({"out", "workers", "save_every", "keep", "log_every", "eval_every", "device", "grad_checkpointing",
                          "min_concept_coverage", "skip_nonfinite", "image_root", "resume", "report_to", "wandb_project_name",
                          "eval_benchmarks", "eval_data_root", "val_data", "keep_best", "torchcompile",
                          "dist_timeout", "seeds", "accept_accum"})


def latest_checkpoint(out: str | Path) -> Path | None:
    """The run's newest complete checkpoint, the one a resume goes on from: the step OUT/checkpoints/latest names, else,
    where the pointer is missing, empty or names a step removed by hand, the newest whole step, said, as `load_model`
    takes the run folder (`checkpoint_folder`); None before the first."""
    run = RunFolder(out)
    if not run.pointer.exists() and not run.whole():
        return None
    return checkpoint_folder(run.out)


# What a run writes in OUT: a planted link at any of them would be written through, or its target's files deleted.
RUN_FILES = (LOCK_NAME, "log.jsonl", "train.log", RunFolder.CHECKPOINTS, "tensorboard", "wandb", "wandb_id")


class RunLock(FolderLock):
    """Held from the run's start to its end by the process that writes the folder (rank 0)."""

    def __init__(self, out: Path):
        super().__init__(out / LOCK_NAME, "another compclip train", place=f"--out {out}",
                         then="wait for it to finish, or choose another --out")
        self.out, self.created = out, not out.exists()

    def acquire(self) -> RunLock:
        if self.out.is_dir():
            refuse_links(self.out, RUN_FILES)
        return super().acquire()

    def release(self, keep_folder: bool = True) -> None:
        """Unlock; with `keep_folder` False, a folder this run created and left without a checkpoint is removed."""
        if not self.held:
            return
        super().release()
        if not keep_folder and self.created and not RunFolder(self.out).checkpoints.exists():
            for name in (LOCK_NAME, "train.log"):
                (self.out / name).unlink(missing_ok=True)
            if not any(self.out.iterdir()):
                self.out.rmdir()


def extends(saved: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether `now` is the saved run given more to do: more --steps (or --epochs), the same otherwise. open_clip_train
    resumes with more epochs so; a cosine schedule then stretches to the new end from the step it resumes at."""
    more = now.get("steps", 0) > saved.get("steps", now.get("steps", 0))
    fewer_epochs = None not in (saved.get("epochs"), now.get("epochs")) and now["epochs"] < saved["epochs"]
    return more and not fewer_epochs


def changed_options(saved: dict[str, Any], now: dict[str, Any], defaults: dict[str, Any] | None = None) -> list[str]:
    """`option old -> new` for each option that defines a run and differs between the two configurations. More steps
    extend a run (`extends`): its length, and a warm-up drawn as a share of it, are not changes then; fewer are. An
    option newer than the saved run counts as its default there (`defaults`)."""
    out, defaults = [], defaults or {}
    longer = extends(saved, now)
    for key in sorted(set(saved) | set(now)):
        if key in NOT_DEFINING or (longer and key in ("steps", "epochs")):
            continue
        if longer and key == "warmup" and saved.get("warmup_fraction") and saved.get("warmup_fraction") == now.get("warmup_fraction"):
            continue  # drawn from the steps: a share of the new length
        old, new = saved.get(key, defaults.get(key)), now.get(key)
        if isinstance(old, list):  # JSON holds tuples as lists
            old = tuple(old)
        if isinstance(new, list):
            new = tuple(new)
        if old != new:
            out.append(f"{key} {old!r} -> {new!r}")
    return out
