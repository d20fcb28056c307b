"""Where and in what precision a forward pass runs, one definition for training and evaluation: the device, and fp32
or autocast in bf16 or fp16."""
from __future__ import annotations

import contextlib

import torch

from .errors import UsageError

PRECISIONS = ("fp32", "amp_bf16", "amp")


def autocast(device: torch.device, precision: str):
    """`torch.autocast` for amp (fp16) and amp_bf16, nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16 if precision == "amp_bf16" else torch.float16)


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
