"""Caption surgery shared by the negative makers: joined sentences, case that stays in place (their seeded choices:
`compclip.text.caption_rng`)."""
from __future__ import annotations


def join_sentences(*parts: str) -> str:
    """Sentences as one text, each ending in punctuation (a period added where missing)."""
    return " ".join(p if p[-1:] in ".!?" else p + "." for p in (s.strip() for s in parts) if p)


def recase(word: str, was_initial: bool, template: str, to_initial: bool) -> str:
    """`word` moved to `template`'s place: a sentence-initial capital stays with the position, not the word."""
    head = word.split()[0] if word.split() else word
    if was_initial and word[:1].isupper() and not (len(head) > 1 and head.isupper()):
        word = word[:1].lower() + word[1:]
    if to_initial and template[:1].isupper():
        word = word[:1].upper() + word[1:]
    return word
