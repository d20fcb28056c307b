"""The training loop, in one screen: draw a step's micro-batches, forward, loss, backward, clip, step, schedule, log.
Everything else is a hook: evaluation, saving and preemption (`Trainer.after_step`), the NaN guard (`faults`)."""
from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

from .distributed import DistEnv
from .faults import NonFiniteGuard
from .state import TrainState
from .step import loss_step


def train_loop(
    state: TrainState,
    steps: Iterable[int],
    draw: Callable[[], list[dict[str, Any]]],
    env: DistEnv,
    guard: NonFiniteGuard,
    after_step: Callable[[dict[str, Any]], None],
    grad_clip_norm: float | None = None,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> dict[str, float]:
    """Run `steps` optimizer steps; `draw()` gives one step's micro-batches (accumulated exactly, `loss_step`), and
    `after_step(record)` sees each step's record under open_clip_train's names (its `log_data`: loss terms, `lr`, `scale`,
    `samples_per_second` and `_per_gpu`, `batch_time`, `data_time`, its wait for data). Returns the last terms."""
    terms: dict[str, float] = {}
    for _ in steps:
        start = time.perf_counter()
        micro = draw()
        data_time = time.perf_counter() - start  # the wait for the batch: the last step's work ended at its logged loss
        state.method.begin_step(state.step)
        state.optimizer.zero_grad(set_to_none=True)
        terms = loss_step(state.module, state.method, micro, env, autocast, lambda loss: state.scaler.scale(loss).backward())
        grad_norm = None
        if guard.skips(state.step, terms, state.named_parameters(), state.scaler.is_enabled()):
            state.optimizer.zero_grad(set_to_none=True)
        else:
            if grad_clip_norm is not None:  # as open_clip_train: on the unscaled gradients
                state.scaler.unscale_(state.optimizer)
                grad_norm = float(torch.nn.utils.clip_grad_norm_(state.trained(), grad_clip_norm))  # before clipping
            state.scaler.step(state.optimizer)
            state.scaler.update()
        state.scheduler.step()
        with torch.no_grad():  # as open_clip does: keep the temperature in range
            state.model.logit_scale.clamp_(0, math.log(100))
        state.step += 1
        batch_time = time.perf_counter() - start
        samples = sum(len(b["caption"]) for b in micro)  # this process's
        record = {"step": state.step, "epoch": state.data.epoch, "loss": sum(terms.values()), **terms,
                  "lr": state.scheduler.get_last_lr()[-1], "scale": state.model.logit_scale.exp().item(),
                  "samples_per_second": samples * env.world_size / batch_time, "samples_per_second_per_gpu": samples / batch_time,
                  "batch_time": batch_time, "data_time": data_time}
        if grad_norm is not None:
            record["grad_norm"] = grad_norm
        after_step(record)
    return terms
