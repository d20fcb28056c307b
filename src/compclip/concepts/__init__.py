"""Concept extraction with spaCy: noun phrases, POS tags, scene graphs, keyword hits; fast, cached."""
from .build import build_store, parse_part
from .inputs import iter_captions
from .keywords import COCO_OBJECTS, COLORS, KEYWORDS, LOCATION_SWAPS, SIZE_SWAPS, find_keywords
from .pipeline import WHAT, extract, load_nlp, parse_what, pipeline_id
from .shards import SampleConcepts, shards_with_concepts
from .store import ConceptStore

__all__ = [
    "COCO_OBJECTS",
    "COLORS",
    "KEYWORDS",
    "LOCATION_SWAPS",
    "SIZE_SWAPS",
    "WHAT",
    "ConceptStore",
    "SampleConcepts",
    "build_store",
    "extract",
    "find_keywords",
    "iter_captions",
    "load_nlp",
    "parse_part",
    "parse_what",
    "pipeline_id",
    "shards_with_concepts",
]
