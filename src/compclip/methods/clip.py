"""Plain CLIP fine-tuning: symmetric InfoNCE over the batch's image-text similarities."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..gather import GatheredLoss
from .base import LossPart, image_rows, register_method


def clip_loss(
    image: torch.Tensor,
    text: torch.Tensor,
    logit_scale: torch.Tensor | float,
    *,
    all_image: torch.Tensor | None = None,
    all_text: torch.Tensor | None = None,
    image_offset: int = 0,
    extra_i2t: torch.Tensor | None = None,
) -> torch.Tensor:
    """½ (CE(image→text) + CE(text→image)), each summed over local rows and divided by the global batch.

    `extra_i2t` (local rows × k) are logits appended to each image's row, such as its hard negatives'.
    """
    all_image = image if all_image is None else all_image
    all_text = text if all_text is None else all_text
    targets = image_rows(image.shape[0], image.device, image_offset)
    logits = logit_scale * image @ all_text.T
    if extra_i2t is not None:
        logits = torch.cat([logits, extra_i2t], dim=1)
    i2t = F.cross_entropy(logits, targets, reduction="sum")
    t2i = F.cross_entropy(logit_scale * text @ all_image.T, targets, reduction="sum")
    return (i2t + t2i) / (2 * all_image.shape[0])


class CLIPLoss(GatheredLoss):
    """open_clip's `ClipLoss` (symmetric InfoNCE, the mean of both directions) over the batch of every rank:
    `CLIPLoss(rank=, world_size=)(image_features, text_features, logit_scale)`, the full batch's value on every rank;
    with `output_dict=True` `{"contrastive_loss": loss}`, as open_clip's."""

    def forward(self, image_features, text_features, logit_scale, output_dict: bool = False):
        self.check_inputs(image_features, text_features, logit_scale=logit_scale)
        counts = self.gather.counts(image_features)
        share = clip_loss(image_features, text_features, logit_scale, all_image=self.gather.rows(image_features, counts),
                          all_text=self.gather.rows(text_features, counts), image_offset=self.gather.first(counts))
        loss = self.gather.total(share)
        return {"contrastive_loss": loss} if output_dict else loss


class CLIPPart(LossPart):
    name = "clip"
    contrastive = True

    def __init__(self):
        super().__init__()
        self.loss = CLIPLoss()

    def forward(self, out):
        return {"clip": self.loss(out["image_features"], out["text_features"], out["logit_scale"])}


def build(options, *, concepts=None, seed: int = 0) -> list[LossPart]:
    return [CLIPPart()]


register_method("clip", build)
