"""NegCLIP-style hard negatives: swap two noun phrases, or two adjectives, within the caption (or, as the binding world's
positive control `attswap`, the modifiers nearest the nouns of two noun phrases).

The phrases and POS tags come from the concept store (`compclip concepts --what
noun-phrases,pos`), so no spaCy runs in the data loader. As NegCLIP's loss (CLIC's Eq. 2 writes it
so), every swapped caption of the global batch is one more text of the batch: an extra column of
every image's image→text row; `negatives_in=row` gives each image its own negatives alone, as
`hardneg` does.

Hard-negative images (option `hard_images`), as NegCLIP's released trainer (github.com/vinid/neg_clip@e680f8e) puts
them in the batch: each sample brings a second image with its own caption, and that caption's swap too
(`src/training/data.py`, `CsvDataset.__getitem__`: `new_images`, `new_texts`, `new_hard`); `src/training/train.py`,
`train_one_epoch`, encodes the images [X; X̃] and the texts [Y; Ỹ; Y'; Ỹ'], and open_clip's `ClipLoss` (`loss.py`)
takes every image's row over all the texts and every caption's row (Y and Ỹ: `logits_per_text[:len(logits_per_image)]`)
over all the images, the targets on the diagonal: NegCLIP's loss over a batch of twice the samples. The second image is
a nearest neighbour of the sample's (`neighbours`: a record index drawn from the record's list, the released
`random.choice(self.hard_images[idx])`) or the sample's own negative image and caption (`negative_image`: TripletCLIP's
data fields, the binding world's colour-swapped scene).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..concepts.keywords import with_case_of
from ..errors import UsageError
from ..gather import GatheredLoss
from ..models.tokens import encode_short_texts
from ..text import caption_rng, sentences
from .base import ROWS, LossPart, option, owned, register_method, text_width_of
from .clip import clip_loss
from .hardneg import HardNegativePart
from .hardneg import Options as HardNegativeOptions
from .text import recase
from .tripletclip import NEGATIVE_CAPTION, NEGATIVE_IMAGE

Span = tuple[int, int]


def swap_spans(caption: str, a: Span, b: Span, starts: frozenset[int] = frozenset({0})) -> str:
    """`caption` with the texts at spans `a` and `b` exchanged; `starts` are the sentence starts (capitals stay there)."""
    (s1, e1), (s2, e2) = sorted((a, b))
    first, second = caption[s1:e1], caption[s2:e2]
    moved_second = recase(second, s2 in starts, first, s1 in starts)
    moved_first = recase(first, s1 in starts, second, s2 in starts)
    return caption[:s1] + moved_second + caption[e1:s2] + moved_first + caption[e2:]


# What separates the members of one list: ", ", " and ", ", and ", " or ", " & "
_LIST_GAP = re.compile(r"\s*(?:,\s*(?:(?:and|or|&)\s+)?|(?:and|or|&)\s+)", re.IGNORECASE)
# A relation that holds both ways round: "A desktop computer next to a laptop computer", "A cat is near a dog"
_SYMMETRIC_GAP = re.compile(r"\s+(?:(?:is|are)\s+)?(?:next to|near|beside|alongside|close to|adjacent to|plus)\s+", re.IGNORECASE)


def coordinated(caption: str, spans: Sequence[Span], a: Span, b: Span) -> bool:
    """Whether exchanging `a` and `b` says the same thing, a true caption: they are members of one list ("a cat and a
    dog", "A, B, C and D", "red and white"), linked by list separators alone through the spans between them; or the two
    ends of a symmetric relation ("A next to B", "A is near B", "A plus B") whose first end opens its sentence (in "a
    banana on a counter next to a cup" the counter is the object of "on", and the exchange is false)."""
    first, second = sorted((a, b))
    chain, end, s2 = [], first[1], second[0]
    for s, e in sorted(spans):
        if s >= end and e <= s2:
            chain.append((end, s))
            end = e
    chain.append((end, s2))
    if all(_LIST_GAP.fullmatch(caption[x:y]) for x, y in chain):
        return True
    opens = caption[: first[0]].strip() in ("", ".", "!", "?") or caption[: first[0]].rstrip()[-1:] in (".", "!", "?")
    return opens and all(_LIST_GAP.fullmatch(caption[x:y]) or _SYMMETRIC_GAP.fullmatch(caption[x:y]) for x, y in chain)


SWAPS = ("noun_phrase", "adjective", "attribute")


def swap_candidates(caption: str, record: dict[str, Any], kinds: Sequence[str] = SWAPS[:2]) -> dict[str, list[tuple[Span, Span]]]:
    """Pairs of spans in one sentence whose exchange changes what the caption says, by kind: `noun_phrase` (two
    non-overlapping noun phrases), `adjective` (two adjectives, never of one noun phrase), `attribute` (the modifiers
    nearest the nouns of two noun phrases: "a white couch next to a red table"). Never two members of one list, nor
    adjectives that turn one listed phrase into the other: either exchange is a paraphrase."""
    phrases = [(s, e) for _, s, e in record.get("noun_phrases", ())]
    tokens = [(s, e, tag) for _, s, e, tag in record.get("pos", ())]
    adjectives = [(s, e) for s, e, tag in tokens if tag == "ADJ"]
    attributes = []  # the word before each noun phrase's last: an adjective, or a noun as one (spaCy tags "orange cross" PROPN PROPN)
    for p in phrases:
        inside = [t for t in tokens if p[0] <= t[0] and t[1] <= p[1]]
        if len(inside) >= 2 and inside[-2][2] in ("ADJ", "NOUN", "PROPN"):
            attributes.append(inside[-2][:2])
    phrase_of = {a: next((p for p in phrases if p[0] <= a[0] and a[1] <= p[1]), None) for a in adjectives + attributes}
    bounds = sentences(caption)
    sentence_of = lambda span: next((k for k, (s, e) in enumerate(bounds) if s <= span[0] and span[1] <= e), -1)  # noqa: E731
    text = lambda span: caption[span[0]:span[1]].lower()  # noqa: E731

    def paraphrase(a: Span, b: Span) -> bool:
        """Adjectives of two listed phrases whose exchange turns each phrase into the other ("a blue star and a red star")."""
        pa, pb = phrase_of[a], phrase_of[b]
        if pa is None or pb is None:
            return False
        if pa == pb:
            return True  # "a large red star" -> "a red large star"
        moved = lambda p, old, new: text(p)[: old[0] - p[0]] + text(new) + text(p)[old[1] - p[0]:]  # noqa: E731
        return coordinated(caption, phrases, pa, pb) and sorted((moved(pa, a, b), moved(pb, b, a))) == sorted((text(pa), text(pb)))

    out = {}
    for kind, spans in (("noun_phrase", phrases), ("adjective", adjectives), ("attribute", sorted(set(attributes)))):
        if kind not in kinds:
            continue
        pairs = [
            (a, b) for i, a in enumerate(spans) for b in spans[i + 1 :]
            if (a[1] <= b[0] or b[1] <= a[0]) and sentence_of(a) == sentence_of(b) != -1 and text(a) != text(b)
            and not coordinated(caption, spans, a, b) and (kind == "noun_phrase" or not paraphrase(a, b))
        ]
        if pairs:
            out[kind] = pairs
    return out


def swap_everywhere(caption: str, record: dict[str, Any], a: Span, b: Span) -> str:
    """`caption` with modifiers `a` and `b` exchanged wherever their phrases' text from the modifier on recurs: "a large
    red triangle, a small orange cross ... the red triangle" -> "a large orange triangle, a small red cross ... the
    orange triangle". One swap alone leaves the other sentences saying the opposite: a negative the text betrays by
    itself. The recurrences are found by their words, not by the parse, which misses some phrases."""
    # each modifier with the rest of its phrase ("red triangle")
    tails = {span: caption[span[0]:next(e for _, s, e in record["noun_phrases"] if s <= span[0] and span[1] <= e)] for span in (a, b)}
    changes = {}  # start of a mention: (its modifier's end, the other modifier)
    for span, other in ((a, b), (b, a)):
        for m in re.finditer(rf"(?<![\w-]){re.escape(tails[span])}(?![\w-])", caption, re.IGNORECASE):
            end = m.start() + span[1] - span[0]
            changes.setdefault(m.start(), (end, with_case_of(caption[other[0]:other[1]].lower(), caption[m.start():end])))
    for start, (end, text) in sorted(changes.items(), reverse=True):
        caption = caption[:start] + text + caption[end:]
    return caption


def swap_negatives(caption: str, record: dict[str, Any] | None, k: int = 1, seed: int = 0,
                   kinds: Sequence[str] = SWAPS[:2], everywhere: bool = False) -> list[str]:
    """Up to `k` distinct negatives, each one swap of `kinds` (`swap_candidates`) in `caption`; with `everywhere`, an
    attribute swap changes every mention of the two phrases (`swap_everywhere`).

    `record` is the caption's concept record (`noun_phrases` and `pos`). The kind of swap is
    drawn first, then the pair, from (seed, caption).
    """
    if not record:
        return []
    candidates = swap_candidates(caption, record, kinds)
    starts = frozenset(s for s, _ in sentences(caption))
    rng, chosen = caption_rng(seed, caption), []
    while candidates and len(chosen) < k:
        kind = rng.choice(sorted(candidates))
        pairs = candidates[kind]
        pair = pairs.pop(rng.randrange(len(pairs)))
        negative = swap_everywhere(caption, record, *pair) if everywhere and kind == "attribute" else swap_spans(caption, *pair, starts)
        if not pairs:
            del candidates[kind]
        if negative != caption and negative not in chosen:
            chosen.append(negative)
    return chosen


NEGATIVES_IN = ("batch", "row")
HARD_IMAGES = ("none", "neighbours", "negative_image")


class NegCLIPLoss(GatheredLoss):
    """NegCLIP's loss (Yuksekgonul et al.): open_clip's ClipLoss with the swapped captions as more texts of the batch,
    columns of every image's image→text row, over the batch of every rank: `NegCLIPLoss(rank=, world_size=)(
    image_features, text_features, negative_features, logit_scale)`, the full batch's value on every rank
    (`compclip.gather`). `swap_negatives` makes the negatives of a caption."""

    def forward(self, image_features, text_features, negative_features, logit_scale):
        self.check_inputs(image_features, text_features, negative_features=negative_features, logit_scale=logit_scale)
        counts = self.gather.counts(image_features)
        negatives = self.gather.rows(negative_features)
        share = clip_loss(image_features, text_features, logit_scale, all_image=self.gather.rows(image_features, counts),
                          all_text=self.gather.rows(text_features, counts), image_offset=self.gather.first(counts),
                          extra_i2t=logit_scale * image_features @ negatives.T)
        return self.gather.total(share)


class SwapNegativePart(HardNegativePart):
    """The InfoNCE with noun-phrase and adjective swaps as negatives: texts of the whole batch (NegCLIP's) or of their
    own image's row; with `hard_images`, each sample's hard-negative image, its caption and that caption's swaps are more
    samples of the batch (NegCLIP's released batch)."""

    name = "negclip"
    uses_concepts = True

    def __init__(self, k: int = 1, seed: int = 0, negatives_in: str = "batch", swaps: Sequence[str] = SWAPS[:2],
                 name: str = "negclip", everywhere: bool = False, hard_images: str = "none"):
        super().__init__(HardNegativeOptions(negatives=k, negatives_as="extra", directions="mean"), seed)  # §2.1's row form
        self.name = name
        if negatives_in not in NEGATIVES_IN:
            raise UsageError(f"negatives_in must be one of {', '.join(NEGATIVES_IN)}, not {negatives_in!r}")
        unknown = [k for k in swaps if k not in SWAPS]
        if unknown or not swaps:
            raise UsageError(f"swaps must be some of {', '.join(SWAPS)}, not {','.join(swaps)!r}")
        if hard_images not in HARD_IMAGES:
            raise UsageError(f"hard_images must be one of {', '.join(HARD_IMAGES)}, not {hard_images!r}")
        if hard_images != "none" and negatives_in != "batch":
            raise UsageError(f"hard_images={hard_images} puts more samples in the batch, whose swaps are columns of every "
                             "image's row (NegCLIP's released batch): it needs negatives_in=batch, not row")
        self.negatives_in, self.swaps, self.everywhere, self.hard_images = negatives_in, tuple(swaps), everywhere, hard_images
        if negatives_in == "batch":  # every rank's negatives are columns of every image's row
            self.outputs = {"negative_features": owned("negative_image")}
            self.loss = NegCLIPLoss()
        if hard_images != "none":  # the records' neighbours, drawn by the reader, or each sample's own negative
            self.sample_fields = ("neighbours",) if hard_images == "neighbours" else (NEGATIVE_IMAGE, NEGATIVE_CAPTION)
            self.token_fields = ("negative_text", "hard_text")
            self.negative_concepts = True
            # the negatives' owners index the doubled batch, which no loss of the batch form reads
            self.outputs = {"negative_features": ROWS, "hard_image_features": ROWS, "hard_text_features": ROWS}

    def negatives(self, caption: str, record: dict[str, Any] | None) -> list[str]:
        return swap_negatives(caption, record, self.k, self.seed, self.swaps, self.everywhere)

    def prepare(self, batch, samples, tokenizer):
        if self.hard_images == "none":
            return super().prepare(batch, samples, tokenizer)
        captions = [s[NEGATIVE_CAPTION] for s in samples]
        batch["hard_image"], batch["hard_text"] = torch.stack([s[NEGATIVE_IMAGE] for s in samples]), tokenizer(captions)
        records = batch.get("concepts") or [None] * len(samples)
        self.add_negatives(batch, batch["caption"] + captions, records + batch["negative_concepts"],
                           torch.cat([batch["text"], batch["hard_text"]]), tokenizer)

    def extend(self, model, batch, out):
        super().extend(model, batch, out)
        if self.hard_images != "none":  # the released forward pass: the hard images and their captions by the same towers
            out["hard_image_features"] = F.normalize(model.encode_image(batch["hard_image"]), dim=-1)
            out["hard_text_features"] = F.normalize(encode_short_texts(model, batch["hard_text"], text_width_of(batch, "hard_text")),
                                                    dim=-1)

    def forward(self, out):
        if self.negatives_in == "row":
            return super().forward(out)
        image, text = out["image_features"], out["text_features"]
        if self.hard_images != "none":  # [X; X̃] and [Y; Ỹ]: every rank's rows gathered alike, so each keeps its pair
            image, text = torch.cat([image, out["hard_image_features"]]), torch.cat([text, out["hard_text_features"]])
        return {self.name: self.loss(image, text, out["negative_features"], out["logit_scale"])}


@dataclass(frozen=True)
class Options:
    negatives: int = option(1, "swapped negatives per caption, 1 to 3")
    negatives_in: str = option("batch", "batch: every swapped caption is a text of the batch, a column of every image's row "
                                         "(NegCLIP's loss); row: only its own image's row (as hardneg)")
    hard_images: str = option("none", "none; neighbours: each record's data field 'neighbours' (record indices of the same "
                                      "data, NegCLIP's neg_image column) gives a hard-negative image, drawn one per sample, "
                                      "whose caption and swap join the batch as NegCLIP's released train.py puts them; "
                                      "negative_image: each sample's negative_image and negative_caption fields do")


def build(options: Options, *, concepts=None, seed: int = 0) -> Sequence[LossPart]:
    return [SwapNegativePart(options.negatives, seed, options.negatives_in, hard_images=options.hard_images)]


register_method("negclip", build, Options, ("noun_phrases", "pos"))
