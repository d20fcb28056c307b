"""The binding world: a synthetic compositional dataset with exact ground truth, and its benchmarks."""
from .captions import Statement, holds, long_caption, negatives, pair_statement, short_phrases
from .generate import WorldConfig, generate, heldout_pairs
from .scene import COLORS, SHAPES, SIZES, Obj, Scene, next_to, place, relation, render

__all__ = [
    "COLORS", "SHAPES", "SIZES", "Obj", "Scene", "Statement", "WorldConfig", "generate", "heldout_pairs",
    "holds", "long_caption", "negatives", "next_to", "pair_statement", "place", "relation", "render", "short_phrases",
]
