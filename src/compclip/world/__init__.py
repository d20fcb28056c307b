"""The binding world: a synthetic compositional dataset with exact ground truth, and its benchmarks.

`WorldConfig` (the declaration `compclip world generate` is generated from), scenes and captions import nothing
heavy; the generator loads the benchmarks' modules on first use."""
from ..lazy import lazy_names
from .captions import Statement, holds, long_caption, negatives, pair_statement, short_phrases
from .config import WorldConfig
from .scene import COLORS, SHAPES, SIZES, Obj, Scene, next_to, place, relation, render

__getattr__ = lazy_names(__name__, {"generate": ".write", "heldout_pairs": ".write"})

__all__ = [
    "COLORS", "SHAPES", "SIZES", "Obj", "Scene", "Statement", "WorldConfig", "generate", "heldout_pairs",
    "holds", "long_caption", "negatives", "next_to", "pair_statement", "place", "relation", "render", "short_phrases",
]
