"""The learning-rate schedule, the parameter groups and the optimizer: plain functions of numbers and named parameters,
testable without a model or a run. Our own, checked against open_clip_train's (tests/test_train_parts.py): its
`cosine_lr` has no warm-up start or floor (CLIC's recipe needs both), and its groups are made inline in its `main`."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["lr_schedule", "make_optimizer", "param_groups"]


def lr_schedule(lr: float, steps: int, warmup: int = 0, schedule: str = "cosine", warmup_lr: float = 0.0,
                min_lr: float = 0.0) -> Callable[[int], float]:
    """Each step's rate as a share of `lr` (torch's `LambdaLR`): linear warm-up from `warmup_lr` over `warmup` steps, then
    constant ("const") or a cosine down to `min_lr` at `steps` (open_clip's schedule where both are 0)."""
    start, floor = warmup_lr / lr, min_lr / lr

    def factor(step: int) -> float:
        if step < warmup:
            return start + (1 - start) * (step + 1) / warmup
        if schedule == "const":
            return 1.0
        done = (step - warmup) / max(1, steps - warmup)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, done)))

    return factor


def param_groups(named_parameters: Iterable[tuple[str, torch.nn.Parameter]], weight_decay: float) -> list[dict[str, Any]]:
    """open_clip's split of the trained parameters: no weight decay on gains, biases, norms and the logit scale."""
    decay, no_decay = [], []
    for name, p in named_parameters:
        if not p.requires_grad:
            continue
        exclude = p.ndim < 2 or "bn" in name or "ln" in name or "bias" in name or "logit_scale" in name
        (no_decay if exclude else decay).append(p)
    return [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": weight_decay}]


def make_optimizer(name: str, groups: list[dict[str, Any]], lr: float, betas: tuple[float, float], eps: float) -> torch.optim.Optimizer:
    """adam, adamw or sgd (`TrainConfig.optimizer`) over `groups`. adam: weight decay as L2 in the gradient, as torch's Adam does it; adamw:
    decoupled. Fused (one kernel over all parameters, on CPU and GPU) where every parameter is a float on one of those:
    7x faster than the per-tensor loop for the binding world's small models on a CPU."""
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr)
    adam = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    params = [p for g in groups for p in g["params"]]
    fused = all(p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.float16, torch.bfloat16) for p in params)
    return adam(groups, lr=lr, betas=betas, eps=eps, fused=fused or None)
