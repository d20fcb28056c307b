"""DAC (Doveh et al., NeurIPS 2023, "Dense and Aligned Captions (DAC) Promote Compositional Reasoning in VL Models"), as
its released code (github.com/SivanDoveh/DAC@ca23611) trains it with the README's commands (`--mil_dense
--mil_dense_negs --vl_negs --neg_type rand_both --mil_batch 10`); the released code is the
definition (docs/methods.md §2.6).

Each image comes with its dense captions (DAC-LLM: sentences an LLM wrote from the image's caption; DAC-SAM: BLIP-2
captions of its SAM segments), a data field, `dense_captions`: a list of texts per sample, which the JSON lines and
webdataset readers take from each record (docs/data.md). Three terms, from `ClipLoss` in `src/open_clip/loss.py`:

- the image-text InfoNCE with each caption's rule-based negative as one more column of every image's row (`forward`;
  the text→image side without them), as `--vl_negs` without `--no_neg_in_contrastive` computes it;
- the negative term `get_loss_neg_only`: for each image whose caption has a negative, a cross-entropy over its caption
  and that negative, the caption the class, averaged over those images, weighted by `--neg_w` (1);
- the MIL term `get_loss_mil_dense`: each image's `mil_batch` texts drawn with replacement from its dense captions and
  its caption (`CsvDataset.__getitem__`: `random.choices(sentences + [caption], k=mil_batch)`) are its positives
  together, log-sum-exp(s(I_i, P_ik)) over k the numerator x_ii; the mean over images of LSE(x_i**, x_*i*) − x_ii,
  every image's row against every image's texts and every image against its texts, and (`--mil_dense_negs`) of
  LSE(s(I_i, P_ik), s(I_i, N_ik)) − x_ii over its own texts and their negatives N_ik, weight 1.

The negatives are `Negatives.create_negs` of `src/SVLC_learning/negs_and_pos.py` (`word_list_negative`): a word of
one of five lists (colour, action, material, size, state) exchanged for another of its list, SVLC's rule and lists
(`svlc.list_negatives`). The released
`RandBothNegatives` draws it or, half the time, `Negatives_Auto`, a word filled in by a masked language model: with
`lm_negatives` a caption's negative is drawn so (`rand_both_negative`), from the data field `llm_negatives` that
`compclip negatives --what llm` writes (SVLC-R+L's field: DAC's `src/SVLC_learning` is SVLC's); the MIL texts'
negatives stay the word lists'. A text without a negative has, in the released MIL term, an all-zero token row that
the text tower encodes (`absent_negative=zeros`); its caption term leaves it out.

Declaring a data field (`LossPart.sample_fields`) is how any method reads more per sample than (image, caption): the
readers carry it, a format that cannot hold it is refused; CoN-CLIP's negated captions (a text) and SVLC-R+L's
language-model negatives (a list per masked word of its places' fills) are such fields.
"""
from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from ..concepts.config import LLM_NEGATIVES
from ..errors import UsageError
from ..gather import GatheredLoss
from ..models.tokens import encode_short_texts
from ..text import caption_rng
from .base import ROWS, LossPart, Output, option, register_method, text_width_of
from .clip import clip_loss
from .svlc import list_negatives, llm_negative

DENSE_CAPTIONS = "dense_captions"  # the data field: each sample's dense captions, a list of texts
ABSENT = ("zeros", "masked")


def word_list_negative(caption: str, rng: random.Random) -> str | None:
    """The released `Negatives.create_negs` (num_negs 1, all five lists), SVLC's rule (`svlc.list_negatives`, DAC's
    `src/SVLC_learning` is SVLC's): None where the list drawn has none of the caption's words."""
    made = list_negatives(caption, rng)
    return made[0] if made else None


def rand_both_negative(caption: str, filled: Sequence[Sequence[Sequence[str]]], rng: random.Random) -> str | None:
    """The released `RandBothNegatives.create_negs` (num_negs 1): a fair draw between the word-list negative and one of
    the caption's masked-LM fills (`Negatives_Auto`, SVLC's `NegativesLLM` rule: a word, one of its places, one of that
    place's fills, `svlc.llm_negative`; `filled`, the data field `llm_negatives`); None where the draw finds none, as the
    released code gives none for a caption without a word."""
    if rng.choice([0, 1]) == 0:
        return word_list_negative(caption, rng)
    return llm_negative(caption, filled, rng)


def dense_draw(caption: str, dense: Sequence[str], k: int, rng: random.Random) -> list[str]:
    """The released MIL texts of one image: `k` drawn with replacement from its dense captions and its caption."""
    return rng.choices([*dense, caption], k=k)


def dac_loss(image: torch.Tensor, text: torch.Tensor, negatives: torch.Tensor, negative_mask: torch.Tensor, dense: torch.Tensor,
             dense_negatives: torch.Tensor | None, dense_negative_mask: torch.Tensor, logit_scale: torch.Tensor | float, *,
             all_image: torch.Tensor | None = None, all_text: torch.Tensor | None = None, all_negatives: torch.Tensor | None = None,
             all_dense: torch.Tensor | None = None, image_offset: int = 0, total: int | None = None,
             negative_total: torch.Tensor | None = None, in_contrastive: bool = True, absent: str = "zeros") -> dict[str, torch.Tensor]:
    """This rank's shares of the three terms, each summed over its rows and divided by its global count.

    `negatives` (rows × dim) and `negative_mask` (rows) are each caption's negative; `dense` (rows × k × dim) the MIL
    texts, `dense_negatives` (the same shape, None: no dense negatives) their negatives, `dense_negative_mask` (rows × k)
    1 where one exists. `all_*` are every rank's (`all_negatives` the existing caption negatives, `all_dense` rows × k ×
    dim); `negative_total` the batch's captions with a negative."""
    all_image = image if all_image is None else all_image
    all_text = text if all_text is None else all_text
    all_negatives = negatives[negative_mask.bool()] if all_negatives is None else all_negatives
    all_dense = dense if all_dense is None else all_dense
    total = all_image.shape[0] if total is None else total
    negative_total = negative_mask.sum() if negative_total is None else negative_total
    extra = logit_scale * image @ all_negatives.T if in_contrastive and all_negatives.shape[0] else None
    itc = clip_loss(image, text, logit_scale, all_image=all_image, all_text=all_text, image_offset=image_offset, extra_i2t=extra)
    pair = logit_scale * torch.stack([(image * text).sum(-1), (image * negatives).sum(-1)], dim=1)
    chosen = F.cross_entropy(pair, torch.zeros(pair.shape[0], dtype=torch.long, device=pair.device), reduction="none")
    neg = (chosen * negative_mask).sum() / negative_total.clamp(min=1)
    own = logit_scale * torch.einsum("bd,bkd->bk", image, dense)  # x_ii: image i against its own k texts
    numerator = torch.logsumexp(own, dim=1)
    rows = logit_scale * image @ all_dense.flatten(0, 1).T  # image i against every image's texts
    columns = logit_scale * torch.einsum("jd,bkd->bjk", all_image, dense).flatten(1)  # every image against image i's texts
    mil = (torch.logsumexp(torch.cat([rows, columns], dim=1), dim=1) - numerator).sum()
    if dense_negatives is not None:
        against = logit_scale * torch.einsum("bd,bkd->bk", image, dense_negatives)
        if absent == "masked":
            against = against.masked_fill(dense_negative_mask == 0, float("-inf"))
        mil = mil + (torch.logsumexp(torch.cat([own, against], dim=1), dim=1) - numerator).sum()
    return {"itc": itc, "neg": neg, "mil": mil / total}


class DACLoss(GatheredLoss):
    """DAC's loss over the batch of every rank: `DACLoss(neg_weight=, in_contrastive=, absent=, rank=, world_size=)(
    image_features, text_features, negative_features, negative_mask, dense_features, dense_negative_features,
    dense_negative_mask, logit_scale)` -> `{"dac": InfoNCE, "dac_neg": weighted negative term, "dac_mil": MIL term}`, the
    full batch's values on every rank. `negative_features` (images × dim; a row of zeros where `negative_mask`, images,
    is 0), `dense_features` (images × k × dim), `dense_negative_features` (the same, or None for no dense negatives),
    `dense_negative_mask` (images × k)."""

    def __init__(self, neg_weight: float = 1.0, in_contrastive: bool = True, absent: str = "zeros", rank: int = 0,
                 world_size: int = 1, group=None):
        super().__init__(rank, world_size, group)
        if absent not in ABSENT:
            raise UsageError(f"absent_negative must be one of {', '.join(ABSENT)}, not {absent!r}")
        self.neg_weight, self.in_contrastive, self.absent = neg_weight, in_contrastive, absent

    def forward(self, image_features, text_features, negative_features, negative_mask, dense_features, dense_negative_features,
                dense_negative_mask, logit_scale):
        per_image = {"negative_features": negative_features, "dense_features": dense_features,
                     "dense_negative_mask": dense_negative_mask}
        if dense_negative_features is not None:
            per_image["dense_negative_features"] = dense_negative_features
        self.check_inputs(image_features, text_features, per_image=per_image, logit_scale=logit_scale)
        if dense_features.ndim != 3 or dense_negative_mask.shape != dense_features.shape[:2] or (
                dense_negative_features is not None and dense_negative_features.shape != dense_features.shape) or (
                negative_mask.shape != negative_features.shape[:1]):
            raise UsageError(f"DACLoss: dense_features {tuple(dense_features.shape)} must be (images, texts, dimension), "
                             f"dense_negative_mask {tuple(dense_negative_mask.shape)} (images, texts), dense_negative_features "
                             f"the shape of dense_features and negative_mask {tuple(negative_mask.shape)} one value an image")
        counts = self.gather.counts(image_features)
        existing = negative_features[negative_mask.bool()]
        share = dac_loss(image_features, text_features, negative_features, negative_mask, dense_features, dense_negative_features,
                         dense_negative_mask, logit_scale, all_image=self.gather.rows(image_features, counts),
                         all_text=self.gather.rows(text_features, counts), all_negatives=self.gather.rows(existing),
                         all_dense=self.gather.rows(dense_features, counts), image_offset=self.gather.first(counts),
                         total=sum(counts), negative_total=self.gather.rows(negative_mask.detach()).sum(),
                         in_contrastive=self.in_contrastive, absent=self.absent)
        return {"dac": self.gather.total(share["itc"]), "dac_neg": self.gather.total(self.neg_weight * share["neg"]),
                "dac_mil": self.gather.total(share["mil"])}


@dataclass(frozen=True)
class Options:
    mil_batch: int = option(10, "texts drawn per image for the MIL term, with replacement, from its dense captions and caption "
                                "(the README's --mil_batch 10; params.py's default is 5)")
    dense_negatives: bool = option(True, "each MIL text's negative beside its image's positives (the README's --mil_dense_negs)")
    caption_negatives: bool = option(True, "each caption's negative: a column of the InfoNCE and the negative term (the README's "
                                           "--vl_negs)")
    neg_weight: float = option(1.0, "weight of the negative term (params.py --neg_w 1)")
    negatives_in_contrastive: bool = option(True, "the caption negatives are columns of the InfoNCE's image rows (params.py: "
                                                  "--no_neg_in_contrastive off)")
    absent_negative: str = option("zeros", "a MIL text without a negative: zeros, an all-zero token row encoded as its negative "
                                           "(the released CsvDataset); masked, left out of its log-sum-exp")
    lm_negatives: bool = option(False, "each caption's negative is, half the time, one of its masked-LM fills (the released "
                                       "--neg_type rand_both, Negatives_Auto: a word, a place of it, a fill): each record's data "
                                       "field llm_negatives (`compclip negatives --what llm`); off: the word-list negative alone")


class DACPart(LossPart):
    """DAC's three terms; the batch transform draws each image's MIL texts and makes the negatives."""

    name = "dac"
    contrastive = True
    sample_fields = (DENSE_CAPTIONS,)
    token_fields = ("negative_text", "dense_text", "dense_negative_text")
    outputs: ClassVar[Mapping[str, Output]] = {"negative_features": ROWS, "negative_mask": ROWS, "dense_features": ROWS,
                                               "dense_negative_features": ROWS, "dense_negative_mask": ROWS}

    def __init__(self, options: Options = Options(), seed: int = 0):
        super().__init__()
        if options.mil_batch < 1:
            raise UsageError(f"mil_batch must be 1 or more, not {options.mil_batch}")
        self.k, self.seed, self.options = options.mil_batch, seed, options
        self.sample_fields = (DENSE_CAPTIONS, LLM_NEGATIVES) if options.lm_negatives else (DENSE_CAPTIONS,)
        self.loss = DACLoss(options.neg_weight, options.negatives_in_contrastive, options.absent_negative)

    def prepare(self, batch, samples, tokenizer):
        """Each image's draws from (seed, caption, its place in the epoch): the same in any worker or rank, and new in an
        epoch that shuffles (the released loader draws anew at every read)."""
        captions, drawn, negatives, dense_negatives = batch["caption"], [], [], []
        for caption, sample in zip(captions, samples, strict=True):
            rng = caption_rng(self.seed, "dac", caption, *(str(sample[k]) for k in ("shard", "pos") if k in sample))
            negatives.append(self.caption_negative(caption, sample, rng) if self.options.caption_negatives else None)
            texts = dense_draw(caption, sample[DENSE_CAPTIONS], self.k, rng)
            drawn += texts
            dense_negatives += [word_list_negative(t, rng) for t in texts] if self.options.dense_negatives else []
        batch["dense_text"] = tokenizer(drawn)
        made = [n for n in negatives if n is not None]
        tokens = tokenizer(made) if made else batch["text"][:0]
        owners = torch.tensor([i for i, n in enumerate(negatives) if n is not None], dtype=torch.long)
        # a change past the context's end leaves the caption's own tokens: that would be the positive, trained as a negative
        seen = (tokens != batch["text"][owners]).any(dim=1)
        batch["negative_text"], batch["negative_owner"] = tokens[seen], owners[seen]
        batch["negative_mask"] = torch.zeros(len(captions)).index_fill_(0, owners[seen], 1.0)
        if self.options.dense_negatives:
            rows = tokenizer([n or "" for n in dense_negatives])
            exists = torch.tensor([n is not None for n in dense_negatives]) & (rows != batch["dense_text"]).any(dim=1)
            batch["dense_negative_text"] = rows * exists[:, None]  # the released all-zero row where there is none
            batch["dense_negative_mask"] = exists.float().view(len(captions), self.k)
        else:
            batch["dense_negative_mask"] = torch.zeros(len(captions), self.k)

    def caption_negative(self, caption: str, sample: Mapping, rng: random.Random) -> str | None:
        if self.options.lm_negatives:
            return rand_both_negative(caption, sample[LLM_NEGATIVES], rng)
        return word_list_negative(caption, rng)

    def extend(self, model, batch, out):
        image = out["image_features"]
        dim, rows = image.shape[1], image.shape[0]

        def encode(field):
            return F.normalize(encode_short_texts(model, batch[field], text_width_of(batch, field)), dim=-1)

        out["dense_features"] = encode("dense_text").view(rows, self.k, dim)
        mask = batch["negative_mask"].to(image.device)
        negatives = out["text_features"].new_zeros((rows, dim))
        if batch["negative_text"].shape[0]:
            negatives = negatives.index_put((batch["negative_owner"].to(image.device),), encode("negative_text").to(negatives.dtype))
        out["negative_features"], out["negative_mask"] = negatives, mask.to(negatives.dtype)
        if self.options.dense_negatives:
            out["dense_negative_features"] = encode("dense_negative_text").view(rows, self.k, dim)
        out["dense_negative_mask"] = batch["dense_negative_mask"].to(image.device, negatives.dtype)

    def forward(self, out):
        return self.loss(out["image_features"], out["text_features"], out["negative_features"], out["negative_mask"],
                         out["dense_features"], out.get("dense_negative_features"), out["dense_negative_mask"], out["logit_scale"])


def build(options: Options, *, concepts=None, seed: int = 0) -> Sequence[LossPart]:
    return [DACPart(options, seed)]


register_method("dac", build, Options)
