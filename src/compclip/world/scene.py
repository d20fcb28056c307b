"""The binding world's scenes: 1–4 coloured shapes on a cluttered background, drawn with Pillow.

A scene is plain data (`Scene`), sampled from a seed, so that every caption and every negative
can be checked against it, and rendered deterministically: the same seed gives the same bytes.
"""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import asdict, dataclass, replace

from PIL import Image, ImageDraw

SHAPES = ("square", "circle", "triangle", "star", "hexagon", "diamond", "cross")
COLORS = {
    "red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (240, 210, 40),
    "purple": (140, 60, 190), "orange": (245, 140, 30), "white": (250, 250, 250), "black": (15, 15, 15),
    "pink": (250, 140, 200), "brown": (130, 80, 40),
}
SIZES = {"small": 0.11, "large": 0.17}  # radius as a fraction of the image side: a small shape spans 14 px at 64 px


@dataclass(frozen=True)
class Obj:
    shape: str
    color: str
    size: str
    x: float  # centre, as a fraction of the image side
    y: float

    @property
    def radius(self) -> float:
        return SIZES[self.size]


@dataclass(frozen=True)
class Scene:
    objects: tuple[Obj, ...]
    background: tuple[int, int, int]
    seed: int

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> Scene:
        return Scene(tuple(Obj(**o) for o in d["objects"]), tuple(d["background"]), d["seed"])


def relation(a: Obj, b: Obj) -> str:
    """Where `a` is with respect to `b`: the dominant axis decides, as a person would say it."""
    dx, dy = a.x - b.x, a.y - b.y
    if abs(dx) >= abs(dy):
        return "to the left of" if dx < 0 else "to the right of"
    return "above" if dy < 0 else "below"


def next_to(a: Obj, b: Obj) -> bool:
    """Side by side: the horizontal offset dominates and the two are close."""
    dx, dy = a.x - b.x, a.y - b.y
    return abs(dx) >= abs(dy) and math.hypot(dx, dy) < 0.4


OPPOSITE = {"to the left of": "to the right of", "to the right of": "to the left of", "above": "below", "below": "above"}


def place(rng: random.Random, seed: int, chosen: list[tuple[str, str]]) -> Scene:
    """Objects with the given (colour, shape) pairs, random sizes, placed without overlap.

    When an object finds no free spot, the whole placement starts again: a scene never
    silently loses an object."""
    while True:
        objects: list[Obj] = []
        for color, shape in chosen:
            size = rng.choice(tuple(SIZES))
            r = SIZES[size]
            for _ in range(100):
                x, y = rng.uniform(r + 0.02, 1 - r - 0.02), rng.uniform(r + 0.02, 1 - r - 0.02)
                far = all(math.hypot(x - o.x, y - o.y) > r + o.radius + 0.03 for o in objects)
                # relations must be readable: never two objects nearly level on both axes
                clear = all(max(abs(x - o.x), abs(y - o.y)) > 0.08 for o in objects)
                if far and clear:
                    objects.append(Obj(shape, color, size, round(x, 4), round(y, 4)))
                    break
            else:
                break
        if len(objects) == len(chosen):
            return Scene(tuple(objects), tuple(rng.randrange(90, 170) for _ in range(3)), seed)


def colour_swap(scene: Scene, rng: random.Random, allowed: set[tuple[str, str]], colors: tuple[str, ...]) -> Scene | None:
    """TripletCLIP's hard negative of a scene: two of its objects with their colours exchanged, the pair drawn from `rng`
    among those whose exchange makes no (colour, shape) pairing outside `allowed` (a held-out one would then be seen in
    training) and none twice; where no pair can (one object, two of one colour), one object recoloured with another of
    `colors` under the same rule; None where neither can. Everything else (places, sizes, background, seed) is the
    scene's, so the rendering differs from the scene's in those objects' pixels alone."""
    objects = scene.objects

    def made(changed: dict[int, str]) -> Scene | None:
        new = tuple(replace(o, color=changed.get(i, o.color)) for i, o in enumerate(objects))
        pairings = [(o.color, o.shape) for o in new]
        return Scene(new, scene.background, scene.seed) if set(pairings) <= allowed and len(set(pairings)) == len(new) else None

    swaps = [made({i: objects[j].color, j: objects[i].color}) for i, j in itertools.combinations(range(len(objects)), 2)
             if objects[i].color != objects[j].color]
    swaps = [s for s in swaps if s is not None]
    if swaps:
        return rng.choice(swaps)
    recoloured = [made({i: c}) for i, o in enumerate(objects) for c in colors if c != o.color]
    recoloured = [s for s in recoloured if s is not None]
    return rng.choice(recoloured) if recoloured else None


def remove_one(scene: Scene, rng: random.Random) -> tuple[Scene, Obj]:
    """CoN-CLIP's distractor of a scene: the scene with one of its objects, drawn from `rng`, taken out (places, sizes,
    background and seed kept), and that object. The scene's negated caption, which names it as absent, holds for the
    distractor and not for the scene (`captions.negated_caption`)."""
    gone = rng.randrange(len(scene.objects))
    return Scene(tuple(o for i, o in enumerate(scene.objects) if i != gone), scene.background, scene.seed), scene.objects[gone]


def _polygon(shape: str, cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    if shape == "square":
        k = r * 0.85
        return [(cx - k, cy - k), (cx + k, cy - k), (cx + k, cy + k), (cx - k, cy + k)]
    if shape == "triangle":
        return [(cx + r * math.cos(a), cy + r * math.sin(a)) for a in (-math.pi / 2, math.pi / 6, 5 * math.pi / 6)]
    if shape == "diamond":
        return [(cx, cy - r), (cx + r * 0.7, cy), (cx, cy + r), (cx - r * 0.7, cy)]
    if shape == "hexagon":
        return [(cx + r * math.cos(math.pi / 3 * i), cy + r * math.sin(math.pi / 3 * i)) for i in range(6)]
    if shape == "star":
        return [(cx + (r if i % 2 == 0 else r * 0.45) * math.cos(-math.pi / 2 + math.pi / 5 * i),
                 cy + (r if i % 2 == 0 else r * 0.45) * math.sin(-math.pi / 2 + math.pi / 5 * i)) for i in range(10)]
    if shape == "cross":
        a, b = r, r * 0.35
        return [(cx - b, cy - a), (cx + b, cy - a), (cx + b, cy - b), (cx + a, cy - b), (cx + a, cy + b), (cx + b, cy + b),
                (cx + b, cy + a), (cx - b, cy + a), (cx - b, cy + b), (cx - a, cy + b), (cx - a, cy - b), (cx - b, cy - b)]
    raise ValueError(shape)


def render(scene: Scene, size: int = 224) -> Image.Image:
    """Background noise and clutter (thin grey strokes, never an object colour), then the objects."""
    rng = random.Random(scene.seed ^ 0x5EED)
    img = Image.new("RGB", (size, size), scene.background)
    draw = ImageDraw.Draw(img)
    for _ in range(12):  # clutter: short thin strokes in the background's own tones
        x, y = rng.uniform(0, size), rng.uniform(0, size)
        shade = tuple(max(0, min(255, c + rng.randint(-40, 40))) for c in scene.background)
        draw.line([(x, y), (x + rng.uniform(-0.2, 0.2) * size, y + rng.uniform(-0.2, 0.2) * size)], fill=shade, width=max(1, size // 64))
    for o in scene.objects:
        cx, cy, r = o.x * size, o.y * size, o.radius * size
        if o.shape == "circle":
            draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=COLORS[o.color])
        else:
            draw.polygon(_polygon(o.shape, cx, cy, r), fill=COLORS[o.color])
    return img
