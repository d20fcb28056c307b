"""SVLC (Doveh et al., "Teaching Structured Vision&Language Concepts to Vision&Language Models", CVPR 2023) with its
rule-based negatives (SVLC-R), as its released code (github.com/SivanDoveh/TSVLC) trains it; the paper's text was not
at hand, so the released code is the definition (docs/methods.md §2.5).

The negatives, `src/SVLC_learning/negs_and_pos.py`, `Negatives.create_negs` (`rule_based_negatives` here): of the word
lists `--vl_neg_type` names (color, action, material, size, state; `compclip.concepts.svlc_lists`), one is drawn among
those with an entry somewhere in the caption's text (`is_positive`: a substring test, "tan" in "standing"); the
caption's whole words (`caption.split()`, case and punctuation kept) in that list are the ones to change; each of
`--num_negs` (1) negatives replaces one of them, drawn anew, by a word of the list not in the caption, drawn without
replacement, through `str.replace`: every occurrence of it in the caption, inside other words too ("in" in "sitting").
A caption whose drawn list has no whole word in it gets no negative.

The loss, `src/open_clip/loss.py`, `ClipLoss.forward` with `--vl_negs` (`svlc_loss` here):
- open_clip's InfoNCE with the batch's negatives as more texts: columns of every image's image→text row, never rows
  of the text→image direction (`logits_per_text[:len(logits_per_image)]`); `--no_neg_in_contrastive` (off) leaves
  them out;
- plus `--neg_w` (1) × `get_loss_neg_only`: for each image with negatives, the cross-entropy over its caption and its
  own negatives with the caption the class, averaged over those images; a batch without any trains the InfoNCE alone.

SVLC-R+L (`llm_negatives`): `BothNegatives` draws, per caption, the rule-based negatives or the language model's
(`NegativesLLM`: a fill-mask pipeline's word in place of a spaCy-tagged one), which compclip reads from the data field
`llm_negatives` (`both_negatives`) that `compclip negatives --what llm` writes, a list per masked word of its places'
fills, drawn word, place, fill as the release draws (`llm_negative`). Departures: the
released code fine-tunes LoRA adapters (`--lora 4`), compclip every weight; the draws come from (seed, caption)
(`text.caption_rng`), not the process's `random` state; a negative cut back to its caption by the context length is
dropped. Across ranks the loss is the whole batch's, as on one process: the released `gather_features` slices the
negatives after cutting them off the texts, so that its runs on several GPUs trained without negative columns
(`negatives_in_contrastive=false`), and averaged `get_loss_neg_only` per GPU.
"""
from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from ..concepts.config import LLM_NEGATIVES
from ..concepts.svlc_lists import LISTS
from ..errors import UsageError
from ..gather import GatheredLoss
from ..text import caption_rng
from .base import LossPart, Output, option, owned, register_method
from .clip import clip_loss
from .hardneg import HardNegativePart
from .hardneg import Options as HardNegativeOptions

TYPES = tuple(LISTS)
REPLACE = ("substring", "word")


def rule_based_negatives(caption: str, k: int = 1, seed: int = 0, types: Sequence[str] = TYPES,
                         replace: str = "substring") -> list[str]:
    """The released `Negatives.create_negs` on `caption`: up to `k` negatives, each one whole word of one drawn list
    replaced by another word of that list. `replace`: "substring" (the released `str.replace`, every occurrence, inside
    other words too) or "word" (whole-word occurrences only). The draws come from (seed, caption)."""
    return list_negatives(caption, caption_rng(seed, caption), k, types, replace)


def list_negatives(caption: str, rng: random.Random, k: int = 1, types: Sequence[str] = TYPES, replace: str = "substring") -> list[str]:
    """`rule_based_negatives` drawing from `rng`: DAC draws a caption's negative and its dense texts' from one generator."""
    present = [t for t in types if any(w in caption for w in LISTS[t])]  # is_positive: a substring test
    words = LISTS[rng.choice(present) if present else types[0]]
    tokens = caption.split()
    in_caption = [w for w in words if w in tokens]
    if not in_caption:
        return []
    pool = [w for w in words if w not in in_caption]  # list(set(attributes) - set(positives_in_cap))
    made: list[str] = []
    for _ in range(min(k, len(pool))):
        new = pool.pop(rng.randrange(len(pool)))
        old = in_caption[rng.randrange(len(in_caption))]
        if replace == "substring":
            made.append(caption.replace(old, new))
        else:
            made.append(re.sub(rf"(?<!\S){re.escape(old)}(?!\S)", new.replace("\\", r"\\"), caption))
    return made


def llm_negative(caption: str, fills: Sequence[Sequence[Sequence[str]]], rng: random.Random) -> str | None:
    """One language-model negative as `NegativesLLM.create_negs` draws it (github.com/SivanDoveh/TSVLC,
    `src/SVLC_learning/negs_and_pos.py` at commit 051718a; DAC's `Negatives_Auto`, github.com/SivanDoveh/DAC, the same
    file at commit 5b8476a): one of the masked words uniformly (`positives_in_cap`, a set of words), one of the places
    it stands uniformly (`random.choice(pos_incides)`), then one of that place's fills other than the word. `fills` is
    the data field `llm_negatives`: a list per word of a list per place of its fills. None where there is no word, or
    the place has no fill (the release's caught error: no negative); a fill equal to the caption is left out."""
    if not fills:
        return None
    places = fills[rng.randrange(len(fills))]
    found = [t for t in places[rng.randrange(len(places))] if t != caption]
    return found[rng.randrange(len(found))] if found else None


def both_negatives(caption: str, given: Sequence[Sequence[Sequence[str]]], k: int = 1, seed: int = 0, types: Sequence[str] = TYPES,
                   replace: str = "substring") -> list[str]:
    """SVLC-R+L's negatives (the released `BothNegatives.create_negs`): a fair draw between the rule-based negatives
    (`list_negatives`) and `k` drawn from `given`, the caption's language-model fills (`llm_negative`, each drawn anew:
    word, place, fill), a draw that finds none giving no negative, as the released code returns none for a caption
    without a word to mask. The draws come from (seed, caption)."""
    rng = caption_rng(seed, caption)
    if rng.choice([0, 1]) == 0:
        return list_negatives(caption, rng, k, types, replace)
    drawn = (llm_negative(caption, given, rng) for _ in range(k))
    return [text for text in drawn if text is not None]


def svlc_loss(image: torch.Tensor, text: torch.Tensor, negatives: torch.Tensor, negative_image: torch.Tensor,
              logit_scale: torch.Tensor | float, *, all_image: torch.Tensor | None = None, all_text: torch.Tensor | None = None,
              all_negatives: torch.Tensor | None = None, image_offset: int = 0, with_negatives: torch.Tensor | None = None,
              in_contrastive: bool = True) -> dict[str, torch.Tensor]:
    """This rank's shares of the two terms: the InfoNCE (summed over its rows, divided by the global batch) and the
    negatives' cross-entropy (summed over its images, divided by `with_negatives`, the global number of images with
    a negative). `negatives[j]` belongs to local image `negative_image[j]`; `all_negatives` (every rank's) are the extra
    columns of every image→text row where `in_contrastive`."""
    all_negatives = negatives if all_negatives is None else all_negatives
    extra = logit_scale * image @ all_negatives.T if in_contrastive else None
    itc = clip_loss(image, text, logit_scale, all_image=all_image, all_text=all_text, image_offset=image_offset, extra_i2t=extra)
    positive = logit_scale * (image * text).sum(-1)
    own = logit_scale * (image[negative_image] * negatives).sum(-1)
    # each row: its caption, then its own negatives (the rest −∞); a row without one has loss 0
    order = torch.argsort(negative_image, stable=True)
    owners = negative_image[order]
    counts = owners.new_zeros(image.shape[0]).index_add_(0, owners, torch.ones_like(owners))
    slot = torch.arange(owners.shape[0], device=image.device) - (counts.cumsum(0) - counts)[owners]
    rows = positive.new_full((image.shape[0], owners.shape[0]), float("-inf")).index_put((owners, slot), own[order])
    rows = torch.cat([positive[:, None], rows], dim=1)
    zero = torch.zeros(image.shape[0], dtype=torch.long, device=image.device)
    with_negatives = (counts > 0).sum() if with_negatives is None else with_negatives
    negative = F.cross_entropy(rows, zero, reduction="sum") / with_negatives.clamp(min=1)
    return {"itc": itc, "negative": negative}


class SVLCLoss(GatheredLoss):
    """SVLC's loss over the batch of every rank: `SVLCLoss(negative_weight=, negatives_in_contrastive=, rank=,
    world_size=)(image_features, text_features, negative_features, negative_image, logit_scale)` -> `{"svlc": InfoNCE
    with the negatives as columns, "svlc_negative": weight × the negatives' cross-entropy}`, the full batch's values on
    every rank. `negative_image[j]`: the local index of negative j's image. `rule_based_negatives` makes them."""

    def __init__(self, negative_weight: float = 1.0, negatives_in_contrastive: bool = True, rank: int = 0, world_size: int = 1,
                 group=None):
        super().__init__(rank, world_size, group)
        self.negative_weight, self.in_contrastive = negative_weight, negatives_in_contrastive

    def forward(self, image_features, text_features, negative_features, negative_image, logit_scale):
        self.check_inputs(image_features, text_features, negative_features=negative_features, negative_image=negative_image,
                          logit_scale=logit_scale)
        counts = self.gather.counts(image_features)
        has = torch.zeros(image_features.shape[0], 1, dtype=image_features.dtype, device=image_features.device)
        has = has.index_fill(0, negative_image, 1.0)
        share = svlc_loss(image_features, text_features, negative_features, negative_image, logit_scale,
                          all_image=self.gather.rows(image_features, counts), all_text=self.gather.rows(text_features, counts),
                          all_negatives=self.gather.rows(negative_features), image_offset=self.gather.first(counts),
                          with_negatives=self.gather.rows(has, counts).sum(), in_contrastive=self.in_contrastive)
        return {"svlc": self.gather.total(share["itc"]), "svlc_negative": self.gather.total(self.negative_weight * share["negative"])}


@dataclass(frozen=True)
class Options:
    negatives: int = option(1, "negatives per caption, 1 to 3 (src/training/params.py: --num_negs 1)")
    negative_weight: float = option(1.0, "weight of the negatives' cross-entropy (params.py: --neg_w 1)")
    negative_types: str = option(",".join(TYPES), "comma-separated word lists to draw from (params.py: --vl_neg_type color "
                                                  "action material size state)")
    negatives_in_contrastive: bool = option(True, "the negatives are columns of every image's InfoNCE row, as the released "
                                                  "loss on one GPU (false: --no_neg_in_contrastive, and what its gather on "
                                                  "several GPUs trains)")
    replace: str = option("substring", "substring: the word is replaced wherever it occurs, inside other words too (the "
                                       "released str.replace); word: whole-word occurrences only")
    llm_negatives: bool = option(False, "SVLC-R+L: each record also holds its caption's language-model negatives, a data field "
                                        "llm_negatives (the released NegativesLLM's fill-mask sentences per masked word and place: "
                                        "`compclip negatives --what llm`), and each caption draws those or the rule-based ones evenly "
                                        "(negs_and_pos.py, BothNegatives; --neg_type both); off: SVLC-R (--neg_type rule_based)")


class SVLCPart(HardNegativePart):
    """SVLC-R: the batch transform makes each caption's rule-based negatives, the loss reads every rank's."""

    name = "svlc"
    outputs: ClassVar[Mapping[str, Output]] = {"negative_features": owned("negative_image")}

    def __init__(self, options: Options = Options(), seed: int = 0):
        if not 1 <= options.negatives <= 3:
            raise UsageError(f"negatives per caption must be 1 to 3, not {options.negatives}")
        super().__init__(HardNegativeOptions(negatives=options.negatives, negatives_as="extra", directions="mean"), seed)
        types = tuple(t.strip() for t in options.negative_types.split(",") if t.strip())
        unknown = [t for t in types if t not in TYPES]
        if unknown or not types:
            raise UsageError(f"negative_types must be some of {', '.join(TYPES)}, not {options.negative_types!r}")
        if options.replace not in REPLACE:
            raise UsageError(f"replace must be one of {', '.join(REPLACE)}, not {options.replace!r}")
        self.types, self.replace, self.llm = types, options.replace, options.llm_negatives
        self.sample_fields = (LLM_NEGATIVES,) if self.llm else ()
        self.loss = SVLCLoss(options.negative_weight, options.negatives_in_contrastive)

    def prepare(self, batch, samples, tokenizer):
        if not self.llm:
            return super().prepare(batch, samples, tokenizer)
        records = [{**(r or {}), LLM_NEGATIVES: s[LLM_NEGATIVES]} for r, s in
                   zip(batch.get("concepts") or [None] * len(samples), samples, strict=True)]
        self.add_negatives(batch, batch["caption"], records, batch["text"], tokenizer)

    def negatives(self, caption: str, record: dict[str, Any] | None) -> list[str]:
        if not self.llm:
            return rule_based_negatives(caption, self.k, self.seed, self.types, self.replace)
        return both_negatives(caption, record[LLM_NEGATIVES], self.k, self.seed, self.types, self.replace)

    def forward(self, out):
        return self.loss(out["image_features"], out["text_features"], out["negative_features"], out["negative_image"],
                         out["logit_scale"])


def build(options: Options, *, concepts=None, seed: int = 0) -> Sequence[LossPart]:
    return [SVLCPart(options, seed)]


register_method("svlc", build, Options)
