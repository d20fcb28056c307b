"""Plain SigLIP fine-tuning: the sigmoid loss over all image-text pairs of the batch."""
from __future__ import annotations

import torch

from .base import LossPart, image_rows, sigmoid_pairs_loss


class SigLIPLoss(LossPart):
    """L = −(1/B) Σ_i Σ_j log σ(z_ij (τ v_i·t_j + b)), z_ij = +1 iff i = j."""

    name = "siglip"
    contrastive = True
    uses_logit_bias = True

    def forward(self, out):
        image, texts = out["image_features"], out.get("all_text_features", out["text_features"])
        logits = out["logit_scale"] * image @ texts.T
        if out["logit_bias"] is not None:
            logits = logits + out["logit_bias"]
        rows = image_rows(image.shape[0], image.device, out.get("image_offset", 0))
        positive = rows[:, None] == torch.arange(texts.shape[0], device=image.device)[None, :]
        return {"siglip": sigmoid_pairs_loss(logits, positive, texts.shape[0])}


def build(options, *, concepts=None, seed: int = 0) -> list[LossPart]:
    return [SigLIPLoss()]
