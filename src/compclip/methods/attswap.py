"""The binding world's positive control: NegCLIP's loss with negatives that exchange the attributes of two objects.

Each negative swaps the modifiers nearest the nouns (adjectives, or nouns used as one) of two noun phrases of one
sentence, at every mention ("a red couch next to a white table" -> "a white couch next to a red table"): a false
statement of exactly the kind a swap-attribute test asks about, so a dual encoder trained on it should bind the
pairings it saw. A world where it does not cannot show binding at all. Not a paper's method: a measuring stick
(docs/methods.md §2.3).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .base import LossPart, option, register_method
from .negclip import SwapNegativePart


@dataclass(frozen=True)
class Options:
    negatives: int = option(3, "attribute swaps per caption, 1 to 3; every one is a text of the batch (NegCLIP's loss)")
    everywhere: bool = option(True, "swap the two phrases' modifiers at every mention of them, so that a negative is a coherent "
                                    "false description; false: at one mention, which the caption's other sentences contradict")


def build(options: Options, *, concepts=None, seed: int = 0) -> Sequence[LossPart]:
    return [SwapNegativePart(options.negatives, seed, "batch", swaps=("attribute",), name="attswap",
                             everywhere=options.everywhere)]


register_method("attswap", build, Options, ("noun_phrases", "pos"))
