"""Plain SigLIP fine-tuning: the sigmoid loss over all image-text pairs of the batch."""
from __future__ import annotations

import torch

from ..gather import GatheredLoss
from .base import LossPart, register_method, sigmoid_pairs_loss


class SigLIPLoss(GatheredLoss):
    """L = −(1/B) Σ_i Σ_j log σ(z_ij (τ v_i·t_j + b)), z_ij = +1 iff i = j, over the batch of every rank.

    As open_clip's `SigLipLoss(rank=, world_size=)(image_features, text_features, logit_scale, logit_bias)`: features
    L2-normalised, `logit_scale` already exponentiated. Each rank scores its images against every rank's texts, so the
    value is the full batch's on every rank (`compclip.gather`); open_clip's returns the mean over images instead. With
    `output_dict=True` `{"contrastive_loss": loss}`, as open_clip's."""

    def forward(self, image_features, text_features, logit_scale, logit_bias=None, output_dict: bool = False):
        self.check_inputs(image_features, text_features, logit_scale=logit_scale, logit_bias=logit_bias)
        counts = self.gather.counts(image_features)
        texts = self.gather.rows(text_features, counts)
        logits = logit_scale * image_features @ texts.T
        if logit_bias is not None:
            logits = logits + logit_bias
        rows = self.gather.local_rows(counts, image_features.device)
        positive = rows[:, None] == torch.arange(texts.shape[0], device=image_features.device)[None, :]
        loss = self.gather.total(sigmoid_pairs_loss(logits, positive, texts.shape[0]))
        return {"contrastive_loss": loss} if output_dict else loss


class SigLIPPart(LossPart):
    name = "siglip"
    contrastive = True
    uses_logit_bias = True

    def __init__(self):
        super().__init__()
        self.loss = SigLIPLoss()

    def forward(self, out):
        return {"siglip": self.loss(out["image_features"], out["text_features"], out["logit_scale"], out["logit_bias"])}


def build(options, *, concepts=None, seed: int = 0) -> list[LossPart]:
    return [SigLIPPart()]


register_method("siglip", build)
