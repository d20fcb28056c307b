"""Text rules shared by several layers: sentence splitting (one rule for the methods that recombine sentences and the
retrieval protocol), text from files compclip did not write set into Markdown, a path on a line of output, and the hint
for a mistyped name.

A results folder, a run's options and a checkpoint's config can come from someone else: put into a model card or a
report unescaped, their `|` splits a table's row, a newline ends it, and `<script>` or `<img onerror=...>` is markup that
GitHub, the Hub or a browser renders or runs.
"""
from __future__ import annotations

import difflib
import hashlib
import html
import random
import re
from collections.abc import Iterable

# A sentence ends at a run of . ! ? followed by whitespace, a capital or the end: "3.5 m" stays whole.
_SENTENCE = re.compile(r"\S.*?(?:[.!?]+(?=[\sA-Z]|\Z)|\Z)", re.S)


def sentences(caption: str) -> list[tuple[int, int]]:
    """Character spans of the caption's sentences, whitespace trimmed; a blank caption is one empty span."""
    spans = [(m.start(), m.start() + len(m.group().rstrip())) for m in _SENTENCE.finditer(caption)]
    return spans or [(0, len(caption))]


_MARKDOWN = re.compile(r"([\\`*\[\]|~])")  # an underscore inside a word is no emphasis on GitHub or the Hub


def markdown_text(value: object) -> str:
    """`value` as inline Markdown text on one line: `<`, `>` and `&` as HTML entities, the marks that make code, emphasis,
    links and table cells backslash-escaped, line breaks as spaces."""
    one_line = " ".join(str(value).splitlines())
    return _MARKDOWN.sub(r"\\\1", html.escape(one_line, quote=False))


def one_line(value: object) -> str:
    """`value` (a path) as a line of output shows it: as it is where every character of it prints, else as a Python
    string literal, so that a newline in a folder's name neither ends the line nor starts one that reads as compclip's."""
    text = str(value)
    return text if text.isprintable() else repr(text)


def did_you_mean(name: str, known: Iterable[str], n: int = 1) -> str:
    """" (did you mean X?)" for a mistyped `name` among `known`, or "" when none is close: the names it begins (a name cut
    short), else difflib's closest `n`. One wording for every name a user types (a method, a benchmark, a split, a
    recipe, a model, an option)."""
    known = sorted(known)
    close = [k for k in known if k.startswith(name) and name][:n] or difflib.get_close_matches(name, known, n=n)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def caption_rng(seed: int, *texts: str) -> random.Random:
    """A generator fixed by (seed, texts): the same caption or batch gets the same draws in every epoch, worker and rank."""
    key = "\0".join((str(seed), *texts)).encode("utf-8", "replace")
    return random.Random(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little"))
