"""`WorldConfig`: the binding world's settings, declared once (`compclip world generate`'s flags come from it)."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from ..options import option
from .scene import COLORS, SHAPES


def heldout_count(fraction: float, pairs: int) -> int:
    """How many of `pairs` colour×shape pairings a world holds out for its unseen split."""
    return round(fraction * pairs)


@dataclass(frozen=True)
class WorldConfig:
    seed: int = option(0, "Seed of the held-out pairings and every scene.")
    n_train: int = option(20_000, "Training scenes.")
    n_val: int = option(500, "Validation scenes.")
    n_test: int = option(500, "Scenes per test split (seen and unseen), and as many single objects for zero-shot.")
    n_singles: int = option(0, "Single objects of seen pairings with short captions (singles/), for a base's curriculum.")
    size: int = option(224, "Image side in pixels (the demo uses 64).")
    heldout: float = option(0.25, "Fraction of colour×shape pairings never seen in training.")
    min_objects: int = option(1, "Fewest objects in a training scene (test scenes have at least 2).")
    max_objects: int = option(4, "Most objects in a scene (2 to 4).")
    colors: int = option(10, "Colours used (the first N of the palette).")
    shapes: int = option(7, "Shapes used (the first N).")
    density: float = option(1.0, "Attribute density: chance that a mention names each attribute (size, colour).")
    completeness: float = option(1.0, "Caption completeness: fraction of a scene's objects its caption mentions (at least one).")
    saliency: bool = option(False, "Saliency bias: captions mention only the largest object.")
    statements: float = option(0.0, "Fraction of scenes of two objects or more captioned by one statement about two of them, in the "
                                    "test's own form ('a red square above a blue star'), instead of a long description.")

    def __post_init__(self) -> None:
        for name in ("n_train", "n_val", "n_test"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, not {getattr(self, name)}")
        if self.n_singles < 0:
            raise UsageError(f"--n-singles must be at least 0, not {self.n_singles}")
        if not 32 <= self.size <= 1024:
            raise UsageError(f"--size must lie in 32..1024 pixels (shapes legible, and {self.n_train:,} scenes of it in memory), "
                             f"not {self.size}")
        if not 0 < self.heldout <= 0.5:
            raise UsageError(f"--heldout must lie in (0, 0.5], not {self.heldout}: the unseen split draws on the held-out "
                             "pairings, and the seen split's scenes and swaps on the others")
        if not 1 <= self.min_objects <= self.max_objects <= 4 or self.max_objects < 2:
            raise UsageError(f"objects per scene: need 1 <= min <= max <= 4 and max >= 2, not {self.min_objects}..{self.max_objects}")
        if not (2 <= self.colors <= len(COLORS) and 2 <= self.shapes <= len(SHAPES)):
            raise UsageError(f"--colors must lie in 2..{len(COLORS)} and --shapes in 2..{len(SHAPES)}, not {self.colors} and {self.shapes}")
        pairs = self.colors * self.shapes
        held = heldout_count(self.heldout, pairs)
        if held < 1:
            raise UsageError(f"--heldout {self.heldout} holds out none of the {pairs} colour×shape pairings: the unseen split needs "
                             f"one at least (--heldout {1 / pairs:.3g} or more)")
        if pairs - held < self.max_objects:
            raise UsageError(f"--heldout {self.heldout} leaves {pairs - held} of the {pairs} colour×shape pairings "
                             f"seen, and a scene of --max-objects {self.max_objects} draws that many: hold out fewer, or lower "
                             "--max-objects")
        for name in ("density", "completeness", "statements"):
            if not 0 <= getattr(self, name) <= 1:
                raise UsageError(f"--{name} must lie in [0, 1], not {getattr(self, name)}")

    @property
    def palette(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The colours and shapes this world uses."""
        return tuple(COLORS)[: self.colors], SHAPES[: self.shapes]
