"""The training state as one object (open_clip_train's `TrainState`): the model, the method's own modules, the optimizer,
the schedule, the loss scaler, the step, and each rank's generators and data position; saved into a checkpoint's
`training_state.pt` beside the weights, and loaded back for an exact resume."""
from __future__ import annotations

import pickle
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import DataError, UsageError
from ..models.checkpoint import STATE_NAME, load_module_weights


def rng_state() -> dict[str, Any]:
    """torch's, numpy's, Python's (and CUDA's) generators, as tensors and lists a `weights_only` load reads back."""
    state = {"torch": torch.get_rng_state(), "numpy": list(np.random.get_state()), "python": random.getstate()}
    state["numpy"][1] = torch.from_numpy(state["numpy"][1].astype(np.int64))
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), *rest))
    random.setstate(tuple(tuple(x) if isinstance(x, list) else x for x in state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class DataPosition:
    """Which micro-batches were consumed: epoch, count, and per-shard record positions."""

    def __init__(self, epoch: int = 0, batches: int = 0, positions: dict[int, int] | None = None):
        self.epoch, self.batches, self.positions = epoch, batches, dict(positions or {})

    def consumed(self, batch: dict[str, Any]) -> None:
        self.batches += 1
        for shard in set(batch["shard"].tolist()):
            mask = batch["shard"] == shard
            self.positions[shard] = int(batch["pos"][mask].max()) + 1

    def new_epoch(self) -> None:
        self.epoch, self.batches, self.positions = self.epoch + 1, 0, {}

    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "batches": self.batches, "positions": self.positions}


@dataclass
class TrainState:
    """Everything a step changes. `module` is what the step runs (the model and the method, DDP-wrapped on many ranks)."""

    model: torch.nn.Module
    method: torch.nn.Module
    module: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    step: int = 0
    data: DataPosition = field(default_factory=DataPosition)

    def trained(self) -> list[torch.nn.Parameter]:
        """The parameters the optimizer updates: the model's and the method's own modules'."""
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def named_parameters(self) -> Iterator[tuple[str, torch.nn.Parameter]]:
        yield from self.model.named_parameters()
        yield from self.method.named_parameters()

    def rank_state(self) -> dict[str, Any]:
        """This rank's part: its generators and data position (every rank's are saved, by rank 0)."""
        return {"rng": rng_state(), "data": self.data.state()}

    def state_dict(self, ranks: list[dict[str, Any]]) -> dict[str, Any]:
        """`training_state.pt`'s contents, given every rank's `rank_state`."""
        return {"step": self.step, "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(), "ranks": ranks}

    def load(self, folder: Path, rank: int, world_size: int) -> None:
        """Go on from a checkpoint folder: weights, the method's modules, optimizer, schedule, scaler, step, and this rank's
        generators and data position. A damaged state file is a `DataError` naming it."""
        from ..models import load_weights

        try:
            saved = torch.load(folder / STATE_NAME, map_location="cpu", weights_only=True)
            self.optimizer.load_state_dict(saved["optimizer"])
            self.scheduler.load_state_dict(saved["scheduler"])
            self.scaler.load_state_dict(saved["scaler"])
            ranks, step = saved["ranks"], saved["step"]
        except (RuntimeError, EOFError, OSError, KeyError, ValueError, pickle.UnpicklingError) as e:
            raise DataError(f"{folder / STATE_NAME}: damaged, cannot resume ({type(e).__name__}: {e})") from None
        if len(ranks) != world_size:
            raise UsageError(f"{folder} was written by {len(ranks)} processes, this run has {world_size}")
        load_weights(self.model, folder / "model.safetensors")
        load_module_weights(self.method, folder)
        set_rng_state(ranks[rank]["rng"])
        self.data = DataPosition(**ranks[rank]["data"])
        self.step = step
