"""Plain CLIP fine-tuning: symmetric InfoNCE over the batch's image-text similarities."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import LossPart, image_rows


def clip_loss(
    image: torch.Tensor,
    text: torch.Tensor,
    logit_scale: torch.Tensor | float,
    *,
    all_image: torch.Tensor | None = None,
    all_text: torch.Tensor | None = None,
    image_offset: int = 0,
) -> torch.Tensor:
    """½ (CE(image→text) + CE(text→image)), each summed over local rows and divided by the global batch."""
    all_image = image if all_image is None else all_image
    all_text = text if all_text is None else all_text
    targets = image_rows(image.shape[0], image.device, image_offset)
    i2t = F.cross_entropy(logit_scale * image @ all_text.T, targets, reduction="sum")
    t2i = F.cross_entropy(logit_scale * text @ all_image.T, targets, reduction="sum")
    return (i2t + t2i) / (2 * all_image.shape[0])


class CLIPLoss(LossPart):
    name = "clip"
    contrastive = True

    def forward(self, out):
        return {"clip": clip_loss(out["image_features"], out["text_features"], out["logit_scale"],
                                  all_image=out.get("all_image_features"), all_text=out.get("all_text_features"),
                                  image_offset=out.get("image_offset", 0))}


def build() -> list[LossPart]:
    return [CLIPLoss()]
