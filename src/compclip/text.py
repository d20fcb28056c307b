"""Sentence splitting: one rule for the methods that recombine sentences and the retrieval protocol."""
from __future__ import annotations

import re

# A sentence ends at a run of . ! ? followed by whitespace, a capital or the end: "3.5 m" stays whole.
_SENTENCE = re.compile(r"\S.*?(?:[.!?]+(?=[\sA-Z]|\Z)|\Z)", re.S)


def sentences(caption: str) -> list[tuple[int, int]]:
    """Character spans of the caption's sentences, whitespace trimmed; a blank caption is one empty span."""
    spans = [(m.start(), m.start() + len(m.group().rstrip())) for m in _SENTENCE.finditer(caption)]
    return spans or [(0, len(caption))]
