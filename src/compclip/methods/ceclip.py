"""CE-CLIP (Zhang, Awal and Agrawal, CVPR 2024), as its released code (github.com/lezhang7/Enhance-FineGrained) trains it.

Three terms over a caption's typed hard negatives (docs/methods.md §2.4), from `Clip_DALoss` in `src/open_clip/loss.py`:

- the image-text InfoNCE with every hard negative of the batch as one more column of every image's row (`forward`'s
  `hardnegative` branch, `--hardnegative`);
- the cross-modal rank term `get_cmr_loss`: relu(θ_k + s(I, T_k⁻) − s(I, T)) over each image's negatives of type k,
  θ_k the previous step's mean margin of type k ("mean" thresholds), clamped to [0, `upper_bound`] (train.py);
- the intra-modal term `get_imc_loss`: a cross-entropy over a caption's similarities to the batch's hard negatives in
  text space whose target is the batch's first negative, as the released code has it (in 2023 and since b8a5244 of
  2024-03-08; until 47cef4e of 2024-03-27 with the image-caption logit a column beside them; `imc_target=image` takes
  the form of 7f4433a, 2024-01-31, to b8a5244, the image-caption logit as the target beside them).

The released data files carry four negatives per caption, precomputed by `data/dataset.py` (`TextAugment.mask_captions`):
a relation swap and three words filled in by a masked language model. compclip makes the relation swap in the batch
transform from the concept store's POS tags; the three fills (an adjective, a noun, a verb) are the data field
`ceclip_negatives` that `compclip negatives --what ceclip` writes, read with `lm_negatives` as three more types.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from ..concepts.config import CECLIP_NEGATIVES
from ..errors import UsageError
from ..gather import GatheredLoss
from ..models.tokens import encode_short_texts
from .base import ROWS, LossPart, Output, image_rows, option, register_method, text_width_of

TYPES = ("relation",)  # the released negative type compclip makes from the caption
LM_TYPES = ("adjective", "noun", "verb")  # the released types a masked LM filled in: the data field ceclip_negatives, in order
IMC_TARGETS = ("first_negative", "image")


def relation_negative(caption: str, record: dict[str, Any] | None) -> str | None:
    """The released relation swap (`TextAugment.mask_captions`): with more than two nouns (spaCy's NOUN), the first
    two exchanged by plain text replacement, as the released `str.replace` calls do; None where it makes no
    negative or one equal to the caption (a repeated noun), which the released files would keep."""
    nouns = [text for text, _, _, tag in (record or {}).get("pos", ()) if tag == "NOUN"]
    if len(nouns) <= 2:
        return None
    first, second = nouns[0], nouns[1]
    swapped = caption.replace(first, "temp1").replace(second, first).replace("temp1", second)
    return None if swapped == caption else swapped


def ceclip_loss(image: torch.Tensor, text: torch.Tensor, negatives: torch.Tensor, mask: torch.Tensor,
                logit_scale: torch.Tensor | float, thresholds: torch.Tensor, *, all_image: torch.Tensor | None = None,
                all_text: torch.Tensor | None = None, all_negatives: torch.Tensor | None = None, image_offset: int = 0,
                total: int | None = None, imc_target: str = "first_negative") -> dict[str, torch.Tensor]:
    """This rank's shares of the three terms, each summed over its rows and divided by the global count.

    `negatives` (rows × types × dim) and `mask` (rows × types, 1 where the negative exists) are this rank's;
    `all_negatives` (the batch's existing negatives, every rank's) are the extra columns of the InfoNCE's image rows
    and the intra-modal term's negatives. `thresholds` (one per type) are the rank term's margins. `imc_target`: the
    intra-modal cross-entropy's class 0, "first_negative" (the batch's first negative: the released `get_imc_loss`) or
    "image" (the image-caption logit, put before the negatives: `get_imc_loss` of commit 7f4433a)."""
    all_image = image if all_image is None else all_image
    all_text = text if all_text is None else all_text
    all_negatives = negatives[mask.bool()] if all_negatives is None else all_negatives
    total = all_image.shape[0] if total is None else total
    targets = image_rows(image.shape[0], image.device, image_offset)
    per_image = logit_scale * image @ torch.cat([all_text, all_negatives]).T
    i2t = F.cross_entropy(per_image, targets, reduction="sum")
    t2i = F.cross_entropy(logit_scale * text @ all_image.T, targets, reduction="sum")
    positive = per_image.gather(1, targets[:, None])  # s(I_i, T_i)
    negative = logit_scale * torch.einsum("bd,bkd->bk", image, negatives) * mask
    cmr = (F.relu(thresholds + negative - positive) * mask).sum() / (total * mask.shape[1])
    intra = logit_scale * text @ all_negatives.T
    if imc_target == "image":
        intra = torch.cat([positive, intra], dim=1)
    # a batch without a negative has no intra-modal term (the released code's cross-entropy has no class there)
    imc = F.cross_entropy(intra, torch.zeros_like(targets), reduction="sum") / total if intra.shape[1] else intra.sum()
    return {"itc": (i2t + t2i) / (2 * total), "cmr": cmr, "imc": imc}


def mean_thresholds(positive: torch.Tensor, negative: torch.Tensor, mask: torch.Tensor, previous: torch.Tensor,
                    upper_bound: float) -> torch.Tensor:
    """The released "mean" update (`get_cmr_loss`, then train.py's clamp): per type, the batch's mean image-caption
    logit less the mean logit of that type's negatives, in [0, `upper_bound`]; a type with no negative in the batch
    keeps its threshold (the released code divides by zero there)."""
    counts = mask.sum(0)
    margin = positive.mean() - (negative * mask).sum(0) / counts.clamp(min=1)
    return torch.where(counts > 0, margin.clamp(0, upper_bound), previous)


class CECLIPLoss(GatheredLoss):
    """CE-CLIP's loss over the batch of every rank: `CECLIPLoss(cmr_weight=, imc_weight=, upper_bound=, rank=,
    world_size=)(image_features, text_features, negative_features, negative_mask, logit_scale, thresholds)` ->
    `({"ceclip": InfoNCE, "ceclip_cmr": weighted rank term, "ceclip_imc": weighted intra-modal term}, next thresholds)`,
    the full batch's values on every rank. `negative_features` (images × types × dim), `negative_mask` (images × types:
    1.0 where the image's caption has a negative of that type); `thresholds` (one per type) are the rank term's margins,
    the next ones computed from this batch (detached), as the released `Clip_DALoss.forward` returns them."""

    def __init__(self, cmr_weight: float = 0.2, imc_weight: float = 0.3, upper_bound: float = 10.0,
                 imc_target: str = "first_negative", rank: int = 0, world_size: int = 1, group=None):
        super().__init__(rank, world_size, group)
        if imc_target not in IMC_TARGETS:
            raise UsageError(f"imc_target must be one of {', '.join(IMC_TARGETS)}, not {imc_target!r}")
        self.cmr_weight, self.imc_weight, self.upper_bound, self.imc_target = cmr_weight, imc_weight, upper_bound, imc_target

    def forward(self, image_features, text_features, negative_features, negative_mask, logit_scale, thresholds):
        self.check_inputs(image_features, text_features, per_image={"negative_features": negative_features,
                                                                    "negative_mask": negative_mask}, logit_scale=logit_scale)
        if negative_features.ndim != 3 or negative_mask.shape != negative_features.shape[:2] or thresholds.shape != (
                negative_mask.shape[1],):
            raise UsageError(f"CECLIPLoss: negative_features {tuple(negative_features.shape)} must be (images, types, dimension), "
                             f"negative_mask {tuple(negative_mask.shape)} (images, types) and thresholds "
                             f"{tuple(thresholds.shape)} one per type")
        counts = self.gather.counts(image_features)
        existing = negative_features[negative_mask.bool()]
        all_image = self.gather.rows(image_features, counts)
        share = ceclip_loss(image_features, text_features, negative_features, negative_mask, logit_scale, thresholds,
                            all_image=all_image, all_text=self.gather.rows(text_features, counts),
                            all_negatives=self.gather.rows(existing), image_offset=self.gather.first(counts), total=sum(counts),
                            imc_target=self.imc_target)
        with torch.no_grad():
            positive = logit_scale * (image_features * text_features).sum(-1)
            negative = logit_scale * torch.einsum("bd,bkd->bk", image_features, negative_features)
            scores = self.gather.rows(torch.cat([positive[:, None], negative, negative_mask], dim=1).detach(), counts)
            types = negative_mask.shape[1]
            following = mean_thresholds(scores[:, 0], scores[:, 1:1 + types], scores[:, 1 + types:], thresholds, self.upper_bound)
        terms = {"ceclip": self.gather.total(share["itc"]), "ceclip_cmr": self.gather.total(self.cmr_weight * share["cmr"]),
                 "ceclip_imc": self.gather.total(self.imc_weight * share["imc"])}
        return terms, following


@dataclass(frozen=True)
class Options:
    cmr_weight: float = option(0.2, "weight of the cross-modal rank term (scripts/run_multiple_nodes.sh: --cmr-loss-weight 0.2)")
    imc_weight: float = option(0.3, "weight of the intra-modal contrastive term (scripts/run_multiple_nodes.sh: "
                                    "--imc-loss-weight 0.3)")
    upper_bound: float = option(10.0, "the rank term's thresholds are clamped to [0, upper_bound] (params.py --upper-bound 10)")
    imc_target: str = option("first_negative", "the intra-modal cross-entropy's target: first_negative, the batch's first hard "
                                               "negative (the released get_imc_loss); image: the image-caption logit, put "
                                               "before the negatives (get_imc_loss of 2024-01-31, commit 7f4433a)")
    threshold_reset: int = option(0, "set the thresholds back to 0 every this many steps, as the released train_one_epoch "
                                     "does at each epoch (give the run's steps per epoch); 0: never")
    lm_negatives: bool = option(False, "the released data's three masked-LM negatives too (adjective, noun, verb), each its own "
                                       "type: each record's data field ceclip_negatives (`compclip negatives --what ceclip`); "
                                       "off: the relation swap alone")


class CECLIPPart(LossPart):
    """CE-CLIP's three terms; the batch transform makes each caption's relation swap from its concept record, and with
    `lm_negatives` takes its three masked-LM negatives from the data field `ceclip_negatives`."""

    name = "ceclip"
    contrastive = True
    uses_concepts = True
    token_fields = ("negative_text",)
    outputs: ClassVar[Mapping[str, Output]] = {"negative_features": ROWS, "negative_mask": ROWS}

    def __init__(self, options: Options = Options()):
        super().__init__()
        if options.upper_bound < 0 or options.threshold_reset < 0:
            raise UsageError(f"upper_bound and threshold_reset must be 0 or more, not {options.upper_bound} and "
                             f"{options.threshold_reset}")
        self.loss = CECLIPLoss(options.cmr_weight, options.imc_weight, options.upper_bound, options.imc_target)
        self.reset = options.threshold_reset
        self.types = TYPES + LM_TYPES if options.lm_negatives else TYPES
        self.sample_fields = (CECLIP_NEGATIVES,) if options.lm_negatives else ()
        # the released train_one_epoch starts each epoch at 0; not saved: a resumed run starts there too
        self.register_buffer("thresholds", torch.zeros(len(self.types)), persistent=False)
        self.following: torch.Tensor | None = None

    def begin_step(self, step: int) -> None:
        """Take the thresholds the last step's batch gave (every micro-batch of a step ranks with the same ones)."""
        if self.following is not None:
            self.thresholds = self.following
            self.following = None
        if self.reset and step % self.reset == 0:
            self.thresholds = torch.zeros_like(self.thresholds)

    def negatives(self, caption: str, record: dict[str, Any] | None, sample: Mapping[str, Any]) -> list[str | None]:
        """One caption's negative of each type (None: none of it): the relation swap, then the three masked-LM fills
        (a record holding fewer has none of the types after)."""
        made = [relation_negative(caption, record)]
        if len(self.types) > len(TYPES):
            given = list(sample[CECLIP_NEGATIVES][:len(LM_TYPES)])
            made += given + [None] * (len(LM_TYPES) - len(given))
        return made

    def prepare(self, batch, samples, tokenizer):
        records = batch.get("concepts") or [None] * len(batch["caption"])
        made = [self.negatives(c, r, s) for c, r, s in zip(batch["caption"], records, samples, strict=True)]
        where = [(i, k) for i, row in enumerate(made) for k, text in enumerate(row) if text is not None]
        tokens = tokenizer([made[i][k] for i, k in where]) if where else batch["text"][:0]
        owners = torch.tensor([i for i, _ in where], dtype=torch.long)
        kinds = torch.tensor([k for _, k in where], dtype=torch.long)
        # a change past the context's end leaves the caption's own tokens: that would be the positive, trained as a negative
        seen = (tokens != batch["text"][owners]).any(dim=1)
        mask = torch.zeros(len(made), len(self.types))
        mask[owners[seen], kinds[seen]] = 1.0
        batch["negative_text"], batch["negative_owner"], batch["negative_mask"] = tokens[seen], owners[seen], mask
        batch["negative_type"] = kinds[seen]

    def extend(self, model, batch, out):
        texts, mask = batch["negative_text"], batch["negative_mask"].to(out["image_features"].device)
        features = out["text_features"].new_zeros((*mask.shape, out["text_features"].shape[1]))
        if texts.shape[0]:
            encoded = F.normalize(encode_short_texts(model, texts, text_width_of(batch, "negative_text")), dim=-1)
            features = features.index_put((batch["negative_owner"].to(features.device), batch["negative_type"].to(features.device)),
                                          encoded.to(features.dtype))
        out["negative_features"], out["negative_mask"] = features, mask.to(features.dtype)

    def forward(self, out):
        terms, self.following = self.loss(out["image_features"], out["text_features"], out["negative_features"],
                                          out["negative_mask"], out["logit_scale"], self.thresholds.to(out["image_features"].device))
        return terms


def build(options: Options, *, concepts=None, seed: int = 0) -> Sequence[LossPart]:
    return [CECLIPPart(options)]


register_method("ceclip", build, Options, ("pos",))
