"""Any two-tower model as the scorer reads one: `encode_image(pixels)` and `encode_text(token ids)`.

open_clip models (and any module with those two methods) are used as they are; a transformers CLIP or SigLIP model
(`get_image_features`, `get_text_features`) is wrapped, so `compclip.evaluate` takes what a user already holds.
"""
from __future__ import annotations

import torch
from torch import nn

from ..errors import UsageError


class TransformersTowers(nn.Module):
    """A transformers dual encoder behind open_clip's two calls, given token ids without an attention mask, as
    `compclip export hf` checks its exports: CLIP's causal tower pools at the end-of-text token, so the padding after
    it changes nothing, and SigLIP reads its fixed-length padded texts whole, as it was trained."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    @staticmethod
    def _pooled(out) -> torch.Tensor:
        return out if isinstance(out, torch.Tensor) else out.pooler_output  # transformers 5 returns the whole output

    def encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        return self._pooled(self.model.get_image_features(pixel_values=pixels))

    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._pooled(self.model.get_text_features(input_ids=tokens))


def two_towers(model: nn.Module) -> nn.Module:
    """`model` itself where it encodes images and texts as open_clip does, else its transformers wrapper."""
    if hasattr(model, "encode_image") and hasattr(model, "encode_text"):
        return model
    if hasattr(model, "get_image_features") and hasattr(model, "get_text_features"):
        return TransformersTowers(model)
    raise UsageError(f"{type(model).__name__} is not a two-tower model: it needs encode_image and encode_text (open_clip) or "
                     "get_image_features and get_text_features (transformers)")
