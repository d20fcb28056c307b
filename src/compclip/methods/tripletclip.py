"""TripletCLIP (Patel et al., NeurIPS 2024, "TripletCLIP: Improving Compositional Reasoning of CLIP via Synthetic
Vision-Language Negatives"), as its released code (github.com/tripletclip/TripletCLIP@abbf81c, `src/openclip/`) trains
it; the released code is the definition (docs/methods.md §2.7).

Each image comes with a hard-negative image and its caption, two data fields: `negative_caption` (y'), a text, and
`negative_image` (x'), an image generated from y', which the reader decodes and views as the image is (docs/data.md;
the released `TripletClipData.__getitem__` in `src/openclip/src/data.py`). That view is open_clip's evaluation
transform (Resize, CenterCrop; `--image-view eval` by default): `src/main.py` hands `get_dataloader` the third value of
`open_clip.create_model_and_transforms`, the preprocessing open_clip evaluates with, and no augmentation. The pair (x', y') is
a second positive pair: `train.py`'s `train_one_epoch` encodes (x, y) and (x', y') in two forward passes of the model,
and `loss.py`'s `tripletclip_loss` is the SUM of two `negclip_loss` terms,

    negclip(X, Y, Y') = ½ [CE(s·X·[Y | Y']ᵀ, i) + CE(s·Y·Xᵀ, i)]
    loss = negclip(X, Y, Y') + negclip(X', Y', Y):

each image's row holds every caption of the batch and every negative caption (the real image's) or every real caption
(the negative image's), the target its own; each caption's row holds the images of its own half only. The negative
images are never columns of a real caption, nor the real images of a negative caption.

The released code runs one process; compclip gathers the four columns (X, Y, X', Y') from every rank, so a batch split
over ranks trains as the one batch (`compclip.gather`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from ..gather import GatheredLoss
from ..models.tokens import encode_short_texts
from .base import ROWS, LossPart, Output, option, register_method, text_width_of
from .clip import clip_loss

NEGATIVE_IMAGE, NEGATIVE_CAPTION = "negative_image", "negative_caption"  # the data fields: x' and y' of each sample


def negclip_share(image: torch.Tensor, text: torch.Tensor, negative_text: torch.Tensor | None, logit_scale: torch.Tensor | float, *,
                  all_image: torch.Tensor, all_text: torch.Tensor, all_negative_text: torch.Tensor | None,
                  image_offset: int = 0) -> torch.Tensor:
    """This rank's share of the released `negclip_loss(image, text, negative_text)`: ½ (CE over each image's row of every
    caption then every negative caption, + CE over each caption's row of every image), summed over this rank's rows and
    divided by the global batch (`all_image`'s rows). `negative_text` None: no negative columns (plain CLIP)."""
    extra = logit_scale * image @ all_negative_text.T if negative_text is not None else None
    return clip_loss(image, text, logit_scale, all_image=all_image, all_text=all_text, image_offset=image_offset, extra_i2t=extra)


class TripletCLIPLoss(GatheredLoss):
    """TripletCLIP's loss over the batch of every rank: `TripletCLIPLoss(negative_weight=, negative_columns=, rank=,
    world_size=)(image_features, text_features, negative_image_features, negative_text_features, logit_scale)` ->
    `{"tripletclip": negclip(X, Y, Y'), "tripletclip_negative": negative_weight × negclip(X', Y', Y)}`, the full batch's
    values on every rank (their sum is the released `tripletclip_loss`). Row i of each of the four is sample i's."""

    def __init__(self, negative_weight: float = 1.0, negative_columns: bool = True, rank: int = 0, world_size: int = 1, group=None):
        super().__init__(rank, world_size, group)
        self.negative_weight, self.negative_columns = negative_weight, negative_columns

    def forward(self, image_features, text_features, negative_image_features, negative_text_features, logit_scale):
        self.check_inputs(image_features, text_features, per_image={"negative_image_features": negative_image_features,
                                                                     "negative_text_features": negative_text_features},
                          logit_scale=logit_scale)
        counts = self.gather.counts(image_features)
        columns = {name: self.gather.rows(x, counts) for name, x in (
            ("image", image_features), ("text", text_features), ("negative_image", negative_image_features),
            ("negative_text", negative_text_features))}
        first, cross = self.gather.first(counts), self.negative_columns
        real = negclip_share(image_features, text_features, negative_text_features if cross else None, logit_scale,
                             all_image=columns["image"], all_text=columns["text"],
                             all_negative_text=columns["negative_text"], image_offset=first)
        negative = negclip_share(negative_image_features, negative_text_features, text_features if cross else None, logit_scale,
                                 all_image=columns["negative_image"], all_text=columns["negative_text"],
                                 all_negative_text=columns["text"], image_offset=first)
        return {"tripletclip": self.gather.total(real), "tripletclip_negative": self.gather.total(self.negative_weight * negative)}


@dataclass(frozen=True)
class Options:
    negative_weight: float = option(1.0, "weight of the negative pair's term negclip(X', Y', Y) (loss.py, tripletclip_loss: "
                                         "loss_1 + loss_2, weight 1)")
    negative_columns: bool = option(True, "each image's row also holds the other half's captions: Y' for a real image, Y for a "
                                          "negative one (loss.py, negclip_loss: cat(img_text, img_negtext)); off: two CLIP "
                                          "losses")


class TripletCLIPPart(LossPart):
    """TripletCLIP's two terms; the batch transform stacks the negative images and tokenizes the negative captions, the
    forward encodes them with the same towers (the released second forward pass)."""

    name = "tripletclip"
    contrastive = True
    image_view = "eval"  # src/main.py: `model, _, transform = create_model_and_transforms(...)`, the evaluation transform
    sample_fields = (NEGATIVE_IMAGE, NEGATIVE_CAPTION)
    token_fields = ("negative_text",)
    outputs: ClassVar[dict[str, Output]] = {"negative_image_features": ROWS, "negative_text_features": ROWS}

    def __init__(self, options: Options = Options()):
        super().__init__()
        self.loss = TripletCLIPLoss(options.negative_weight, options.negative_columns)

    def prepare(self, batch, samples, tokenizer):
        batch["negative_image"] = torch.stack([s[NEGATIVE_IMAGE] for s in samples])
        batch["negative_text"] = tokenizer([s[NEGATIVE_CAPTION] for s in samples])

    def extend(self, model, batch, out):
        out["negative_image_features"] = F.normalize(model.encode_image(batch["negative_image"]), dim=-1)
        out["negative_text_features"] = F.normalize(encode_short_texts(model, batch["negative_text"],
                                                                       text_width_of(batch, "negative_text")), dim=-1)

    def forward(self, out):
        return self.loss(out["image_features"], out["text_features"], out["negative_image_features"], out["negative_text_features"],
                         out["logit_scale"])


def build(options: Options, *, concepts=None, seed: int = 0) -> Sequence[LossPart]:
    return [TripletCLIPPart(options)]


register_method("tripletclip", build, Options)
