"""Training: one process or many (torchrun, SLURM), exact accumulation and resume."""
from .distributed import DistEnv, gather_rows, init_distributed
from .step import gather_outputs, loss_step, merge_micro
from .trainer import TrainConfig, Trainer, train

__all__ = ["DistEnv", "TrainConfig", "Trainer", "gather_outputs", "gather_rows", "init_distributed", "loss_step", "merge_micro", "train"]
