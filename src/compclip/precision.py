"""Where and in what precision a forward pass runs, one definition for training and evaluation: the device, and fp32
or autocast in bf16 or fp16."""
from __future__ import annotations

import contextlib

import torch

from .errors import UsageError


def autocast(device: torch.device, precision: str):
    """`torch.autocast` for amp (fp16) and amp_bf16 (amp_bfloat16), nothing otherwise (open_clip_train's `get_autocast`)."""
    if precision not in ("amp", "amp_bf16", "amp_bfloat16"):
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.float16 if precision == "amp" else torch.bfloat16)


def weights_precision(precision: str) -> str:
    """What open_clip's `create_model` builds the weights in for a training precision: fp32 under autocast."""
    return precision if precision in ("bf16", "fp16", "pure_bf16", "pure_fp16") else "fp32"


def input_dtype(precision: str) -> torch.dtype | None:
    """The dtype images enter a model of 16-bit weights in (open_clip's `get_input_dtype`), None for fp32 weights."""
    return {"bf16": torch.bfloat16, "pure_bf16": torch.bfloat16, "fp16": torch.float16, "pure_fp16": torch.float16}.get(precision)


def resolve_device(device: str | None) -> str:
    """`--device` of a scoring run: cpu, cuda or cuda:N, checked against the GPUs torch sees; None takes the GPU where
    there is one (as CLIP_benchmark), else the CPU."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and (kind == "cpu" or not index.isdigit())):
        raise UsageError(f"--device must be cpu, cuda or cuda:N, not {device!r}")
    if kind == "cuda" and (not torch.cuda.is_available() or int(index or 0) >= torch.cuda.device_count()):
        raise UsageError(f"--device {device}: torch sees {torch.cuda.device_count()} GPU(s) here")
    return device


def image_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype a model's image tower takes its pixels in: that of its first convolution or linear layer (16 bits under
    open_clip's bf16 and pure_bf16, whose embeddings and norms may stay in 32), fp32 where it has none."""
    tower = getattr(model, "visual", model)
    layer = next((m for m in tower.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))), None)
    return layer.weight.dtype if layer is not None else torch.float32
