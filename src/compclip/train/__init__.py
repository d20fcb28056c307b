"""Training: one process or many (torchrun, SLURM), exact accumulation and resume.

`TrainConfig` (the declaration the command line is generated from) imports nothing heavy; the rest loads torch
on first use."""
from ..lazy import lazy_names
from .config import TrainConfig

__getattr__ = lazy_names(__name__, {"DistEnv": ".distributed", "init_distributed": ".distributed", "loss_step": ".step",
                                     "merge_micro": ".step", "Trainer": ".trainer", "train": ".trainer"})

__all__ = ["DistEnv", "TrainConfig", "Trainer", "init_distributed", "loss_step", "merge_micro", "train"]
