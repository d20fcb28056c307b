"""Captions of binding-world scenes, and the statements benchmarks are made of, checked against the scene.

Long descriptions name every object with its attributes and the relation of each neighbouring
pair, in varied sentence forms. A `Statement` is "colour shape relation colour shape" (sizes
optional); `holds(scene, statement)` decides its truth, so every positive is verified true and
every negative verified false.
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, replace

from .scene import OPPOSITE, Obj, Scene, next_to, relation

LEADS = ("There is {}.", "The picture shows {}.", "We see {}.", "In this image: {}.")
PAIR_FORMS = (
    "The {a} is {rel} the {b}.",
    "{A} sits {rel} {b2}.",
    "{Rel} the {b} there is {a2}.",
    "You can see the {a} {rel} the {b}.",
)


def _name(o: Obj) -> str:
    return f"{o.size} {o.color} {o.shape}"


def _list(names: list[str]) -> str:
    names = [f"a {n}" for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def short_phrases(scene: Scene) -> list[str]:
    """One noun phrase per object: "a small red square"."""
    return [f"a {_name(o)}" for o in scene.objects]


def dense_captions(scene: Scene) -> list[str]:
    """A scene's dense captions (DAC's data field): one noun phrase per object and one statement per pair of horizontal
    neighbours, left to right, as a segment captioner and an LLM's sentences describe parts of a photo."""
    order = sorted(scene.objects, key=lambda o: o.x)
    return [*short_phrases(scene), *(pair_statement(a, b).text() for a, b in itertools.pairwise(order))]


def negated_caption(kept: Scene, gone: Obj) -> str:
    """CoN-CLIP's negated caption of a scene with `gone` taken out (`scene.remove_one`): the objects left, then `gone` named
    as absent ("There is a small red square, but no large blue circle."; "There is no large blue circle." where none is
    left). A scene's pairings are its own (no two objects share a colour and shape), so it holds for `kept` alone."""
    absent = f"no {_name(gone)}"
    return f"There is {_list([_name(o) for o in kept.objects])}, but {absent}." if kept.objects else f"There is {absent}."


def single_captions(scene: Scene, index: int) -> dict[str, str]:
    """A single object's short captions: `shape_caption` names only its shape; `caption` names its colour
    and shape, its shape or its colour, in turn by `index`."""
    (o,) = scene.objects
    return {"caption": (f"a {o.color} {o.shape}", f"a {o.shape}", f"something {o.color}")[index % 3], "shape_caption": f"a {o.shape}"}


def mentioned(scene: Scene, rng: random.Random, completeness: float = 1.0, saliency: bool = False) -> list[Obj]:
    """The objects a caption describes, left to right: all of them; a `completeness` fraction (at least
    one); or, with `saliency`, only the most salient one (the largest; the first placed among equals)."""
    objects = sorted(scene.objects, key=lambda o: o.x)
    if saliency:
        return [max(scene.objects, key=lambda o: o.radius)]
    if completeness < 1:
        keep = set(rng.sample(range(len(objects)), max(1, round(completeness * len(objects)))))
        objects = [o for i, o in enumerate(objects) if i in keep]
    return objects


def mention(o: Obj, rng: random.Random, density: float = 1.0) -> str:
    """How a caption names an object: its shape, each attribute (size, colour) kept with probability `density`."""
    if density >= 1:
        return _name(o)
    return " ".join([w for w in (o.size, o.color) if rng.random() < density] + [o.shape])


def long_caption(scene: Scene, rng: random.Random, density: float = 1.0, completeness: float = 1.0, saliency: bool = False) -> str:
    """The described objects (see `mentioned`, `mention`) and the relation between horizontal neighbours
    among them, sentence forms drawn from `rng`. The defaults describe every object with every attribute."""
    objects = mentioned(scene, rng, completeness, saliency)
    names = {id(o): mention(o, rng, density) for o in objects}
    order = objects[:]
    rng.shuffle(order)
    sentences = [rng.choice(LEADS).format(_list([names[id(o)] for o in order]))]
    for a, b in itertools.pairwise(objects):
        if rng.random() < 0.5:
            a, b = b, a
        form = rng.choice(PAIR_FORMS)
        rel = "next to" if next_to(a, b) and rng.random() < 0.3 else relation(a, b)
        na, nb = names[id(a)], names[id(b)]
        sentences.append(form.format(a=na, b=nb, A=f"A {na}", a2=f"a {na}", b2=f"a {nb}", rel=rel, Rel=rel[0].upper() + rel[1:]))
    return " ".join(sentences)


@dataclass(frozen=True)
class Statement:
    """A claim about two objects (`rel` set) or one (`rel` None), with optional sizes and an extra object."""

    color1: str
    shape1: str
    rel: str | None = None
    color2: str | None = None
    shape2: str | None = None
    size1: str | None = None
    extra: tuple[str, str] | None = None  # "... and a <colour> <shape>"

    def text(self) -> str:
        first = " ".join(w for w in ("a", self.size1, self.color1, self.shape1) if w)
        out = first if self.rel is None else f"{first} {self.rel} a {self.color2} {self.shape2}"
        return out + (f" and a {self.extra[0]} {self.extra[1]}" if self.extra else "")

    def pairings(self) -> set[tuple[str, str]]:
        """The colour×shape pairings the statement names."""
        named = {(self.color1, self.shape1), *([(self.color2, self.shape2)] if self.rel is not None else [])}
        return named | ({self.extra} if self.extra else set())

    def paraphrase(self) -> str:
        """The same claim from the other object's side, in other words and order."""
        if self.rel is None:
            return f"there is a {self.color1} {self.shape1}"
        second = " ".join(w for w in (self.size1, self.color1, self.shape1) if w)
        return f"there is a {self.color2} {self.shape2}, and it is {OPPOSITE[self.rel]} the {second}"


def _find(scene: Scene, color: str, shape: str, size: str | None = None) -> Obj | None:
    return next((o for o in scene.objects if o.color == color and o.shape == shape and size in (None, o.size)), None)


def holds(scene: Scene, s: Statement) -> bool:
    first = _find(scene, s.color1, s.shape1, s.size1)
    if first is None:
        return False
    if s.extra is not None and _find(scene, *s.extra) is None:
        return False
    if s.rel is None:
        return True
    second = _find(scene, s.color2, s.shape2)
    if second is None or second is first:
        return False
    return next_to(first, second) if s.rel == "next to" else relation(first, second) == s.rel


def pair_statement(a: Obj, b: Obj) -> Statement:
    return Statement(a.color, a.shape, relation(a, b), b.color, b.shape)


def negatives(scene: Scene, a: Obj, b: Obj, rng: random.Random, shapes, colors) -> dict[str, Statement]:
    """One false statement per SugarCrepe split, each by its rule, kept only when really false."""
    pos = pair_statement(a, b)
    absent_shapes = [s for s in shapes if not any(o.shape == s for o in scene.objects)]
    absent_colors = [c for c in colors if not any(o.color == c for o in scene.objects)]
    candidates = {
        "replace_obj": replace(pos, shape1=rng.choice(absent_shapes)) if absent_shapes else None,
        "replace_att": replace(pos, color1=rng.choice(absent_colors)) if absent_colors else None,
        "replace_rel": replace(pos, rel=OPPOSITE[pos.rel]),
        "swap_obj": replace(pos, shape1=pos.shape2, shape2=pos.shape1) if a.shape != b.shape else None,
        "swap_att": replace(pos, color1=pos.color2, color2=pos.color1) if a.color != b.color else None,
        "add_obj": replace(pos, extra=(rng.choice(colors), rng.choice(absent_shapes))) if absent_shapes else None,
        "add_att": replace(pos, size1="small" if a.size == "large" else "large"),
    }
    return {k: v for k, v in candidates.items() if v is not None and not holds(scene, v)}
