"""One optimizer step's losses: micro-batch accumulation and cross-rank gathering, exactly.

Accumulation works as open_clip's `--accum-freq`: every micro-batch is encoded once without
gradients and cached; then each micro-batch is encoded again with gradients and the loss is
computed over the whole accumulated batch, its own rows carrying gradients. Concept indices
and negative owners are offset by each micro-batch's image start; concept owners then by the
rank's too (negatives stay local: only their own image's row reads them). Shared scalars (τ, b) pass
1/A of their gradient per micro-batch, so A micro-batches of B/A equal one batch of B.

Each loss term is the full batch's on every rank, its gradient scaled for DDP's average
(`compclip.gather`): the loop backpropagates it as it is.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..methods.base import Output
from .distributed import DistEnv


def merge_micro(outs: list[dict[str, Any]], current: int, kinds: Mapping[str, Output]) -> dict[str, Any]:
    """Concatenate micro-batch outputs as each one's declared kind says; scalars from the micro-batch with gradients."""
    starts = [0]
    for o in outs[:-1]:
        starts.append(starts[-1] + o["image_features"].shape[0])
    merged: dict[str, Any] = {}
    for key, kind in kinds.items():
        if key not in outs[current]:  # a part's output on steps where it adds none (CLIC's plain steps)
            continue
        if kind.kind == "rows":
            merged[key] = torch.cat([o[key] for o in outs])
        elif kind.kind == "owned":
            merged[key] = torch.cat([o[key] for o in outs])
            merged[kind.owner] = torch.cat([o[kind.owner] + s for o, s in zip(outs, starts, strict=True)])
        else:
            value = outs[current][key]
            if isinstance(value, torch.Tensor) and value.requires_grad and len(outs) > 1:
                value = value.detach() + (value - value.detach()) / len(outs)
            merged[key] = value
    return merged


def loss_step(
    module: torch.nn.Module,
    method: torch.nn.Module,
    micro_batches: list[dict[str, Any]],
    env: DistEnv,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    backward: Callable[[torch.Tensor], None] = lambda loss: loss.backward(),
) -> dict[str, float]:
    """Forward and backward for one optimizer step, the method's losses gathering over `env`'s ranks; returns the
    full-batch loss terms."""
    method.distribute(env.rank, env.world_size, env.group)
    n = len(micro_batches)
    cached: list[dict[str, Any]] = []
    if n > 1:
        with torch.no_grad(), autocast():
            cached = [module(b) for b in micro_batches]
    terms: dict[str, torch.Tensor] = {}
    for j, batch in enumerate(micro_batches):
        sync = j == n - 1 or not hasattr(module, "no_sync")
        with contextlib.nullcontext() if sync else module.no_sync():
            with autocast():
                current = module(batch)
                outs = [*cached[:j], current, *cached[j + 1:]] if cached else [current]
                terms = method(merge_micro(outs, j, method.output_kinds))
                total = sum(terms.values())
            backward(total)
    if n > 1:  # the parts' own modules act in the loss, evaluated once per micro-batch on the whole batch's outputs
        for p in method.parameters():
            if p.grad is not None:
                p.grad /= n
    return {name: float(t.detach()) for name, t in terms.items()}
