"""CoN-CLIP (Singh et al., "Learn 'No' to Say 'Yes' Better: Improving Vision-Language Models via Negations", WACV 2025),
as its released code (github.com/jaisidhsingh/CoN-CLIP@503388a) trains it; the released code is the definition (docs/methods.md §2.8).

Each image comes with two data fields: `negated_caption` (c'), its caption negated (CC-Neg's `sop_data["negative-prompt"]`,
false for the image), and `distractor_image` (I'), an image for which c' holds (the released code's COCO image, its
`distractor_image_mapping.pt`'s first neighbour), decoded and viewed as the image is
(`FineTuningDatasetWithNegatives.__getitem__`, src/data/finetuning_datasets.py). That view is the evaluation transform
(Resize, CenterCrop; `--image-view eval` by default): `train` (src/conclip_fine_tuning.py) hands the dataset the
`preprocess` of `clip.load`, OpenAI's own, which open_clip's evaluation transform of an OpenAI model equals. `train_one_epoch`
(src/conclip_fine_tuning.py) encodes the 2B images [I ; I'] and the 2B texts [c ; c'] in one forward pass, and
`CustomLossWithNegatives.forward` (src/training_utils/loss_functions.py) is the mean of three cross-entropies:

    L1 = CE(s·I·[c | c']ᵀ, i)     each image against every caption and every negated caption
    L2 = CE(s·c·[I | I']ᵀ, i)     each caption against every image and every distractor
    L3 = CE(s·I'·[c' | c]ᵀ, i)    each distractor against every negated caption (its own the target) and every caption
    loss = (L1 + L2 + L3) / 3.

No term takes a negated caption's row; the image tower is frozen (`--lock-image-encoder on`, src/training_utils/helpers.py).
With `distractor_images` off the released `CustomLoss` (`--negative-images off`) is the mean of L1 and CE(s·c·Iᵀ, i), and
no distractor is read. The released code runs one process; compclip gathers the four columns from every rank, so a batch
split over ranks trains as the one batch (`compclip.gather`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..gather import GatheredLoss
from ..models.tokens import encode_short_texts
from .base import ROWS, LossPart, Output, image_rows, option, register_method, text_width_of

NEGATED_CAPTION, DISTRACTOR_IMAGE = "negated_caption", "distractor_image"  # the data fields: c' and I' of each sample


def _share(rows: torch.Tensor, columns: torch.Tensor, logit_scale, offset: int, batch: int) -> torch.Tensor:
    """This rank's rows' cross-entropy against `columns` (the target: a row's own global index), summed and divided by
    the global batch: its share of the mean over the batch."""
    return F.cross_entropy(logit_scale * rows @ columns.T, image_rows(rows.shape[0], rows.device, offset), reduction="sum") / batch


class CoNCLIPLoss(GatheredLoss):
    """CoN-CLIP's loss over the batch of every rank: `CoNCLIPLoss(rank=, world_size=)(image_features, text_features,
    negated_text_features, distractor_image_features, logit_scale)` -> `{"conclip_image": L1/3, "conclip_text": L2/3,
    "conclip_distractor": L3/3}` (`distractor_image_features` None: the released `CustomLoss`, `{"conclip_image": L1/2,
    "conclip_text": L2/2}` with the images alone as L2's columns), the full batch's values on every rank; their sum is the
    released loss. Row i of each is sample i's."""

    def forward(self, image_features, text_features, negated_text_features, distractor_image_features, logit_scale):
        per_image = {"negated_text_features": negated_text_features}
        if distractor_image_features is not None:
            per_image["distractor_image_features"] = distractor_image_features
        self.check_inputs(image_features, text_features, per_image=per_image, logit_scale=logit_scale)
        counts = self.gather.counts(image_features)
        offset, batch = self.gather.first(counts), sum(counts)
        texts = torch.cat([self.gather.rows(text_features, counts), self.gather.rows(negated_text_features, counts)])
        images = self.gather.rows(image_features, counts)
        if distractor_image_features is None:
            return {"conclip_image": self.gather.total(_share(image_features, texts, logit_scale, offset, batch) / 2),
                    "conclip_text": self.gather.total(_share(text_features, images, logit_scale, offset, batch) / 2)}
        images = torch.cat([images, self.gather.rows(distractor_image_features, counts)])
        negated_first = torch.cat([texts[batch:], texts[:batch]])  # the released `T_rev`: [c' ; c]
        return {"conclip_image": self.gather.total(_share(image_features, texts, logit_scale, offset, batch) / 3),
                "conclip_text": self.gather.total(_share(text_features, images, logit_scale, offset, batch) / 3),
                "conclip_distractor": self.gather.total(_share(distractor_image_features, negated_first, logit_scale, offset, batch) / 3)}


@dataclass(frozen=True)
class Options:
    distractor_images: bool = option(True, "read a distractor image per sample (for which the negated caption holds): the "
                                           "captions' columns and the distractors' own term (--negative-images on, "
                                           "loss_functions.py's CustomLossWithNegatives); off: CustomLoss, negated captions "
                                           "as extra columns of each image's row only")
    lock_image_encoder: bool = option(True, "freeze the image tower, as the released run does (helpers.py: "
                                            "--lock-image-encoder on; conclip_fine_tuning.py sets requires_grad False)")


class CoNCLIPPart(LossPart):
    """CoN-CLIP's terms; the batch transform tokenizes the negated captions and stacks the distractors, the forward encodes
    them with the same towers (the released single forward pass over [I ; I'] and [c ; c'])."""

    name = "conclip"
    contrastive = True
    image_view = "eval"  # conclip_fine_tuning.py: `model, preprocess = clip.load(...)`, the dataset's transform
    token_fields = ("negated_text",)

    def __init__(self, options: Options = Options()):
        super().__init__()
        self.distractors = options.distractor_images
        self.sample_fields = (NEGATED_CAPTION, DISTRACTOR_IMAGE) if self.distractors else (NEGATED_CAPTION,)
        self.outputs: dict[str, Output] = {"negated_text_features": ROWS,
                                           **({"distractor_image_features": ROWS} if self.distractors else {})}
        self.locks_image = options.lock_image_encoder
        self.loss = CoNCLIPLoss()

    def prepare(self, batch, samples, tokenizer):
        batch["negated_text"] = tokenizer([s[NEGATED_CAPTION] for s in samples])
        if self.distractors:
            batch["distractor_image"] = torch.stack([s[DISTRACTOR_IMAGE] for s in samples])

    def extend(self, model, batch, out):
        out["negated_text_features"] = F.normalize(encode_short_texts(model, batch["negated_text"],
                                                                      text_width_of(batch, "negated_text")), dim=-1)
        if self.distractors:
            out["distractor_image_features"] = F.normalize(model.encode_image(batch["distractor_image"]), dim=-1)

    def forward(self, out):
        return self.loss(out["image_features"], out["text_features"], out["negated_text_features"],
                         out.get("distractor_image_features"), out["logit_scale"])


def build(options: Options, *, concepts=None, seed: int = 0) -> Sequence[LossPart]:
    return [CoNCLIPPart(options)]


register_method("conclip", build, Options)
