"""Plain CLIP fine-tuning: symmetric InfoNCE over the batch's image-text similarities."""
from __future__ import annotations

import torch.nn.functional as F

from .base import LossPart, image_rows


class CLIPLoss(LossPart):
    """½ (CE(image→text) + CE(text→image)), each summed over local rows and divided by the global batch."""

    name = "clip"
    contrastive = True

    def forward(self, out):
        image, text = out["image_features"], out["text_features"]
        all_images = out.get("all_image_features", image)
        all_texts = out.get("all_text_features", text)
        targets = image_rows(out, image.shape[0], image.device)
        scale, n = out["logit_scale"], all_images.shape[0]
        i2t = F.cross_entropy(scale * image @ all_texts.T, targets, reduction="sum")
        t2i = F.cross_entropy(scale * text @ all_images.T, targets, reduction="sum")
        return {"clip": (i2t + t2i) / (2 * n)}


def build() -> list[LossPart]:
    return [CLIPLoss()]
