"""Concept extraction with spaCy: noun phrases, POS tags, scene graphs, keyword hits; fast, cached. `build_negatives`:
the released baselines' masked-LM negatives as data fields (`compclip negatives`).

`ConceptConfig` (the declaration `compclip concepts` is generated from) imports nothing heavy; the rest loads spaCy
on first use of any other name here."""
from ..lazy import lazy_names
from .config import ConceptConfig

__getattr__ = lazy_names(__name__, {
    "build_store": ".build", "parse_part": ".build", "iter_captions": ".inputs", "WHAT": ".pipeline", "extract": ".pipeline",
    "load_nlp": ".pipeline", "parse_what": ".pipeline", "pipeline_id": ".pipeline", "SampleConcepts": ".shards",
    "shards_with_concepts": ".shards", "ConceptStore": ".store", "build_negatives": ".negatives",
    **dict.fromkeys(("COCO_OBJECTS", "COLORS", "KEYWORDS", "LOCATION_SWAPS", "SIZE_SWAPS", "find_keywords"), ".keywords"),
})

__all__ = [
    "COCO_OBJECTS",
    "COLORS",
    "KEYWORDS",
    "LOCATION_SWAPS",
    "SIZE_SWAPS",
    "WHAT",
    "ConceptConfig",
    "ConceptStore",
    "SampleConcepts",
    "build_negatives",
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
