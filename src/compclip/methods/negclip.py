"""NegCLIP-style hard negatives: swap two noun phrases, or two adjectives, within the caption.

The phrases and POS tags come from the concept store (`compclip concepts --what
noun-phrases,pos`), so no spaCy runs in the data loader; the negatives feed the same
InfoNCE as `hardneg` (each image's own negatives as extra columns).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..text import sentences
from .base import LossPart, option, require_concept_fields
from .hardneg import HardNegativeLoss
from .text import caption_rng, recase

Span = tuple[int, int]


def swap_spans(caption: str, a: Span, b: Span, starts: frozenset[int] = frozenset({0})) -> str:
    """`caption` with the texts at spans `a` and `b` exchanged; `starts` are the sentence starts (capitals stay there)."""
    (s1, e1), (s2, e2) = sorted((a, b))
    first, second = caption[s1:e1], caption[s2:e2]
    moved_second = recase(second, s2 in starts, first, s1 in starts)
    moved_first = recase(first, s1 in starts, second, s2 in starts)
    return caption[:s1] + moved_second + caption[e1:s2] + moved_first + caption[e2:]


def swap_candidates(caption: str, record: dict[str, Any]) -> dict[str, list[tuple[Span, Span]]]:
    """Pairs of spans in one sentence whose exchange changes the caption: noun phrases (non-overlapping), adjectives."""
    phrases = [(s, e) for _, s, e in record.get("noun_phrases", ())]
    adjectives = [(s, e) for _, s, e, tag in record.get("pos", ()) if tag == "ADJ"]
    bounds = sentences(caption)
    sentence_of = lambda span: next((k for k, (s, e) in enumerate(bounds) if s <= span[0] and span[1] <= e), -1)  # noqa: E731
    out = {}
    for kind, spans in (("noun_phrase", phrases), ("adjective", adjectives)):
        pairs = [
            (a, b) for i, a in enumerate(spans) for b in spans[i + 1 :]
            if (a[1] <= b[0] or b[1] <= a[0]) and sentence_of(a) == sentence_of(b) != -1
            and caption[a[0]:a[1]].lower() != caption[b[0]:b[1]].lower()
        ]
        if pairs:
            out[kind] = pairs
    return out


def swap_negatives(caption: str, record: dict[str, Any] | None, k: int = 1, seed: int = 0) -> list[str]:
    """Up to `k` distinct negatives, each one swap of two noun phrases or two adjectives of `caption`.

    `record` is the caption's concept record (`noun_phrases` and `pos`). The kind of swap is
    drawn first, then the pair, from (seed, caption).
    """
    if not record:
        return []
    candidates = swap_candidates(caption, record)
    starts = frozenset(s for s, _ in sentences(caption))
    rng, chosen = caption_rng(seed, caption), []
    while candidates and len(chosen) < k:
        kind = rng.choice(sorted(candidates))
        pairs = candidates[kind]
        negative = swap_spans(caption, *pairs.pop(rng.randrange(len(pairs))), starts)
        if not pairs:
            del candidates[kind]
        if negative != caption and negative not in chosen:
            chosen.append(negative)
    return chosen


class SwapNegativeLoss(HardNegativeLoss):
    """The hard-negative InfoNCE with noun-phrase and adjective swaps as the negatives."""

    name = "negclip"
    uses_concepts = True

    def __init__(self, concepts=None, k: int = 1, seed: int = 0):
        super().__init__(k, seed)
        require_concept_fields(concepts, ("noun_phrases", "pos"), self.name)

    def negatives(self, caption: str, record: dict[str, Any] | None) -> list[str]:
        return swap_negatives(caption, record, self.k, self.seed)


@dataclass(frozen=True)
class Options:
    negatives: int = option(1, "swapped negatives per image, 1 to 3")


def build(options: Options, *, concepts=None, seed: int = 0) -> Sequence[LossPart]:
    return [SwapNegativeLoss(concepts, options.negatives, seed)]
