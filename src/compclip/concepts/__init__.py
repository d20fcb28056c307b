"""Concept extraction with spaCy: noun phrases, POS tags, scene graphs, keyword hits; fast, cached."""
from .inputs import iter_captions
from .keywords import COCO_OBJECTS, COLORS, KEYWORDS, LOCATION_SWAPS, SIZE_SWAPS, find_keywords
from .pipeline import WHAT, extract, load_nlp, parse_what, pipeline_id
from .store import ConceptStore, build_store

__all__ = [
    "COCO_OBJECTS",
    "COLORS",
    "KEYWORDS",
    "LOCATION_SWAPS",
    "SIZE_SWAPS",
    "WHAT",
    "ConceptStore",
    "build_store",
    "extract",
    "find_keywords",
    "iter_captions",
    "load_nlp",
    "parse_what",
    "pipeline_id",
]
