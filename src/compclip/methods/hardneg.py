"""Hard negatives by keyword permutation (Rösch et al.; docs/methods.md §2), and the InfoNCE that uses them.

A negative caption replaces one keyword of a concept class: a colour or COCO object by any
other of its table, a location or size word by its fixed partner. Each image's row of the
image→text InfoNCE gets its own negatives (HN1–HN3), each in the place of another caption's
column (the paper's Fig. 2) or as an extra column; captions without a keyword train as plain
pairs. `negclip` feeds the same loss with noun-phrase swaps.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from ..concepts.keywords import KEYWORDS, find_keywords, replacements, table, with_case_of
from ..errors import UsageError
from ..gather import GatheredLoss
from ..models.tokens import encode_short_texts
from ..text import caption_rng
from .base import LossPart, Output, image_rows, option, owned, register_method, text_width_of

CLASSES = tuple(KEYWORDS)


def keyword_negatives(caption: str, classes: Sequence[str] = CLASSES, k: int = 1, seed: int = 0, objects: str = "paper") -> list[str]:
    """Up to `k` distinct negatives of `caption`, each with one keyword of `classes` swapped.

    Keywords match whole words, longest first ("in front of" before "front"); the replacement
    takes the keyword's case. Which keyword and which replacement are drawn from (seed, caption).
    `objects` names the object table: "paper" (Table 6's names) or "coco" (COCO's categories).
    """
    by_hit: dict[tuple[int, int], list[str]] = {}  # a hit first, then its replacement: one colour cannot crowd out a location swap
    for cls, keyword, start, end in find_keywords(caption, tuple(classes), objects):
        made = (caption[:start] + with_case_of(w, caption[start:end]) + caption[end:] for w in replacements(cls, keyword, objects))
        by_hit.setdefault((start, end), []).extend(m for m in made if m != caption)
    rng, chosen = caption_rng(seed, caption), []
    while by_hit and len(chosen) < k:
        hit = rng.choice(sorted(by_hit))
        negative = by_hit[hit].pop(rng.randrange(len(by_hit[hit])))
        if not by_hit[hit]:
            del by_hit[hit]
        if negative not in chosen:
            chosen.append(negative)
    return chosen


def hard_negative_infonce(
    image: torch.Tensor,
    text: torch.Tensor,
    negatives: torch.Tensor,
    negative_image: torch.Tensor,
    logit_scale: torch.Tensor | float,
    *,
    all_image: torch.Tensor | None = None,
    all_text: torch.Tensor | None = None,
    image_offset: int = 0,
    replace_draw: torch.Tensor | None = None,
    directions: str = "mean",
) -> torch.Tensor:
    """CE(image→texts) and CE(text→images), summed over local rows / global batch, then halved (`directions="mean"`,
    open_clip's ClipLoss) or added (`"sum"`, Rösch et al.'s Eq. 1).

    `negatives[j]` belongs to local image `negative_image[j]`; an image's row gets only its own negatives: as extra columns
    (missing ones are −∞), or, with `replace_draw` (one number in [0, 1) per negative, the same for an image's negatives),
    each in the place of another caption's column of that row (Fig. 2 of Rösch et al.): the image's k-th negative takes
    the column ⌊draw·(N−1)⌋ + k among the N−1 columns that are not its own caption. All embeddings are L2-normalised.
    """
    all_image = image if all_image is None else all_image
    all_text = text if all_text is None else all_text
    targets = image_rows(image.shape[0], image.device, image_offset)
    logits = logit_scale * image @ all_text.T
    if negatives.shape[0]:
        order = torch.argsort(negative_image, stable=True)  # group by owner: slot = rank within the owner
        owners, feats = negative_image[order], negatives[order]
        counts = owners.new_zeros(image.shape[0]).index_add_(0, owners, torch.ones_like(owners))  # bincount reads its max back
        slot = torch.arange(owners.shape[0], device=image.device) - (counts.cumsum(0) - counts)[owners]
        own = logit_scale * (image[owners] * feats).sum(-1)
        others = all_text.shape[0] - 1
        if replace_draw is not None and others > 0:
            pick = ((replace_draw[order] * others).long() + slot) % others  # among the other captions' columns
            column = pick + (pick >= targets[owners]).long()  # skip the row's own caption
            logits = logits.index_put((owners, column), own)
        else:
            # as many columns as there are negatives (a shape, not the busiest row's count read back from the device)
            extra = own.new_full((image.shape[0], owners.shape[0]), float("-inf")).index_put((owners, slot), own)
            logits = torch.cat([logits, extra], dim=1)
    i2t = F.cross_entropy(logits, targets, reduction="sum")
    t2i = F.cross_entropy(logit_scale * text @ all_image.T, targets, reduction="sum")
    return (i2t + t2i) / (all_image.shape[0] * (2 if directions == "mean" else 1))


NEGATIVES_AS = ("replace", "extra")
DIRECTIONS = ("sum", "mean")


@dataclass(frozen=True)
class Options:
    negatives: int = option(1, "hard negatives per image, 1 to 3 (HN1-HN3)")
    negative_classes: str = option(",".join(CLASSES), "comma-separated keyword classes to permute")
    object_names: str = option("paper", "object table: paper (Table 6: motorbike, aeroplane, sofa, tv monitor) or coco (COCO's "
                                        "category names: motorcycle, airplane, couch, tv)")
    keyword_captions_only: bool = option(False, "train only on captions with a keyword of negative_classes, as the paper's "
                                                "per-class models (§3.3); the others are skipped by the reader")
    negatives_as: str = option("replace", "replace: a negative takes the column of a random other caption of its image's row (the "
                                          "paper's Fig. 2); extra: it is one more column of that row")
    directions: str = option("sum", "sum: image→text plus text→image, the paper's Eq. 1; mean: their mean, open_clip's ClipLoss "
                                    "(half the loss)")


class HardNegativeLoss(GatheredLoss):
    """The CLIP loss with each image's hard-negative captions in its image→text row, over the batch of every rank:
    `HardNegativeLoss(negatives_as=, directions=, rank=, world_size=)(image_features, text_features, negative_features,
    negative_image, logit_scale, negative_draw)`, the full batch's value on every rank (`compclip.gather`).

    `negative_image[j]`: the local index of negative j's image (negatives stay on their rank: only their own image's row
    reads them); `negative_draw` (one number in [0, 1) per negative) picks the column a negative replaces
    (`negatives_as="replace"`, Rösch et al.'s Fig. 2), unused with "extra". `directions`: "sum" (Eq. 1) or "mean"
    (open_clip's ClipLoss). `keyword_negatives` makes the negatives of a caption.
    """

    def __init__(self, negatives_as: str = "replace", directions: str = "sum", rank: int = 0, world_size: int = 1, group=None):
        super().__init__(rank, world_size, group)
        for key, value, allowed in (("negatives_as", negatives_as, NEGATIVES_AS), ("directions", directions, DIRECTIONS)):
            if value not in allowed:
                raise UsageError(f"{key} must be one of {', '.join(allowed)}, not {value!r}")
        self.replace, self.directions = negatives_as == "replace", directions

    def forward(self, image_features, text_features, negative_features, negative_image, logit_scale, negative_draw=None):
        self.check_inputs(image_features, text_features, negative_features=negative_features, negative_image=negative_image,
                          logit_scale=logit_scale, negative_draw=negative_draw)
        if self.replace and negative_draw is None:
            raise UsageError("HardNegativeLoss(negatives_as='replace') needs negative_draw, the column each negative replaces")
        counts = self.gather.counts(image_features)
        share = hard_negative_infonce(
            image_features, text_features, negative_features, negative_image, logit_scale,
            all_image=self.gather.rows(image_features, counts), all_text=self.gather.rows(text_features, counts),
            image_offset=self.gather.first(counts), replace_draw=negative_draw if self.replace else None, directions=self.directions)
        return self.gather.total(share)


class HardNegativePart(LossPart):
    """Rösch et al.'s keyword hard negatives: the batch transform makes each caption's negatives, the loss reads them."""

    name = "hardneg"
    contrastive = True
    token_fields = ("negative_text",)
    # negatives stay on their rank: only their own image's row reads them
    outputs: ClassVar[Mapping[str, Output]] = {"negative_features": owned("negative_image"),
                                               "negative_draw": owned("negative_image")}

    def __init__(self, options: Options = Options(), seed: int = 0):
        super().__init__()
        k, classes, objects = options.negatives, parse_classes(options.negative_classes), options.object_names
        if not 1 <= k <= 3:
            raise UsageError(f"hard negatives per image must be 1 to 3 (HN1-HN3), not {k}")
        unknown = set(classes) - set(CLASSES)
        if unknown or not classes:
            raise UsageError(f"unknown keyword classes {sorted(unknown) or list(classes)}; choose from {', '.join(CLASSES)}")
        table("object", objects)  # a clear error for an unknown table
        self.loss = HardNegativeLoss(options.negatives_as, options.directions)
        self.k, self.seed, self.classes, self.objects = k, seed, tuple(classes), objects
        self.keyword_captions_only = options.keyword_captions_only

    def negatives(self, caption: str, record: dict[str, Any] | None) -> list[str]:
        """The caption's negatives; `record` is its concept record when a part of the method reads concepts."""
        return keyword_negatives(caption, self.classes, self.k, self.seed, self.objects)

    def admits(self, caption: str) -> bool:
        return not self.keyword_captions_only or bool(find_keywords(caption, self.classes, self.objects))

    def prepare(self, batch, samples, tokenizer):
        self.add_negatives(batch, batch["caption"], batch.get("concepts") or [None] * len(batch["caption"]), batch["text"], tokenizer)

    def add_negatives(self, batch, captions: list[str], records: list, text: torch.Tensor, tokenizer) -> None:
        """`batch`'s `negative_text`, `negative_image` (each one's caption's index in `captions`) and `negative_draw`:
        the negatives of `captions` (with their concept `records` and their tokens, `text`)."""
        owners, texts, draws = [], [], []
        for i, (caption, record) in enumerate(zip(captions, records, strict=True)):
            made = self.negatives(caption, record)
            texts += made
            owners += [i] * len(made)
            draws += [caption_rng(self.seed, "column", caption).random()] * len(made)  # which columns they replace
        tokens, owners = tokenizer(texts) if texts else text[:0], torch.tensor(owners, dtype=torch.long)
        # a change past the context's end leaves the caption's own tokens: that would be the positive, trained as a negative
        seen = (tokens != text[owners]).any(dim=1)
        batch["negative_text"], batch["negative_image"] = tokens[seen], owners[seen]
        batch["negative_draw"] = torch.tensor(draws, dtype=torch.float64)[seen]

    def extend(self, model, batch, out):
        texts = batch["negative_text"]
        features = encode_short_texts(model, texts, text_width_of(batch, "negative_text")) if texts.shape[0] else out["text_features"][:0]
        out["negative_features"] = F.normalize(features, dim=-1)
        out["negative_image"], out["negative_draw"] = batch["negative_image"], batch["negative_draw"]

    def forward(self, out):
        return {self.name: self.loss(out["image_features"], out["text_features"], out["negative_features"], out["negative_image"],
                                     out["logit_scale"], out["negative_draw"])}


def parse_classes(classes: str | Sequence[str]) -> tuple[str, ...]:
    """"color,size" or a sequence -> a tuple of class names."""
    return tuple(c.strip() for c in classes.split(",") if c.strip()) if isinstance(classes, str) else tuple(classes)


def build(options: Options, *, concepts=None, seed: int = 0) -> list[LossPart]:
    return [HardNegativePart(options, seed)]


register_method("hardneg", build, Options)
