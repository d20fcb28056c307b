"""One optimizer step's losses: micro-batch accumulation and cross-rank gathering, exactly.

Accumulation works as open_clip's `--accum-freq`: every micro-batch is encoded once without
gradients and cached; then each micro-batch is encoded again with gradients and the loss is
computed over the whole accumulated batch, its own rows carrying gradients. Concept indices
and negative owners are offset by each micro-batch's image start; concept owners then by the
rank's too (negatives stay local: only their own image's row reads them). Shared scalars (τ, b) pass
1/A of their gradient per micro-batch, so A micro-batches of B/A equal one batch of B.

Gradients are scaled by the world size before backward because DDP averages them while the
ranks' loss terms add up to the full-batch loss.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..methods.base import Output
from .distributed import DistEnv, gather_rows, row_counts


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


def gather_outputs(local: dict[str, Any], env: DistEnv, kinds: Mapping[str, Output]) -> dict[str, Any]:
    """Add the global columns (`all_*`) of every gathered output, this rank's `image_offset` and `gather_image_rows`
    (for a term that computes rows per local image against global columns, as OC-CLIP's scores) to the local rows."""
    out = dict(local)
    sizes = row_counts(local["image_features"].shape[0], env, local["image_features"].device)
    out["image_offset"] = sum(sizes[: env.rank])
    out["gather_image_rows"] = lambda rows: gather_rows(rows, env, sizes)  # a term's own per-image rows, with gradients
    for key, kind in kinds.items():
        if key not in local or not kind.gather or kind.kind == "scalar":
            continue
        if kind.kind == "rows":
            out[f"all_{key}"] = gather_rows(local[key], env, sizes)
        else:
            counts = row_counts(local[key].shape[0], env, local[key].device)
            out[f"all_{key}"] = gather_rows(local[key], env, counts)
            out[f"all_{kind.owner}"] = gather_rows(local[kind.owner] + out["image_offset"], env, counts)
    return out


def loss_step(
    module: torch.nn.Module,
    method: torch.nn.Module,
    micro_batches: list[dict[str, Any]],
    env: DistEnv,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    backward: Callable[[torch.Tensor], None] = lambda loss: loss.backward(),
) -> dict[str, float]:
    """Forward and backward for one optimizer step; returns the full-batch loss terms (summed over ranks)."""
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
                terms = method(gather_outputs(merge_micro(outs, j, method.output_kinds), env, method.output_kinds))
                total = sum(terms.values())
            backward(total * env.world_size)
    if n > 1:  # the parts' own modules act in the loss, evaluated once per micro-batch on the whole batch's outputs
        for p in method.parameters():
            if p.grad is not None:
                p.grad /= n
    values = torch.stack([t.detach().float() for t in terms.values()])
    if env.distributed:
        torch.distributed.all_reduce(values, group=env.group)
    return dict(zip(terms, values.tolist(), strict=True))
