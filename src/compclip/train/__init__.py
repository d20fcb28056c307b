"""Training: one process or many (torchrun, SLURM), exact accumulation and resume.

`TrainConfig` (the declaration the command line is generated from) imports nothing heavy; the rest loads torch
on first use."""
from importlib import import_module

from .config import TrainConfig

_LAZY = {"DistEnv": ".distributed", "gather_rows": ".distributed", "init_distributed": ".distributed", "gather_outputs": ".step",
         "loss_step": ".step", "merge_micro": ".step", "Trainer": ".trainer", "train": ".trainer"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DistEnv", "TrainConfig", "Trainer", "gather_outputs", "gather_rows", "init_distributed", "loss_step", "merge_micro", "train"]
