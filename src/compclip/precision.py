"""Precision of a forward pass, one definition for training and evaluation: fp32, or autocast in bf16 or fp16."""
from __future__ import annotations

import contextlib

import torch

PRECISIONS = ("fp32", "amp_bf16", "amp")


def autocast(device: torch.device, precision: str):
    """`torch.autocast` for amp (fp16) and amp_bf16, nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16 if precision == "amp_bf16" else torch.float16)
