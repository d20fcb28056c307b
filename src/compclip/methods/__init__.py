"""Fine-tuning methods behind one contract (`base.Method`), registered by name like timm's models.

`build_method("c2lip", concepts=store)`; combinations join names with "+" (`"c2lip+hardneg"`).

| name | contrastive term | extra terms | combines with |
| --- | --- | --- | --- |
| siglip | sigmoid loss | | c2lip |
| clip | InfoNCE | | c2lip |
| c2lip | SigLIP | L_npc, L_xac | clip, hardneg, negclip (replacing SigLIP) |
| hardneg | InfoNCE + keyword negatives | | c2lip |
| negclip | InfoNCE + phrase/adjective swaps | | c2lip |
| clic | CLIC on image pairs / CLIP | | nothing: it changes the inputs |
| occlip | OC-CLIP's structured similarity | binding module | nothing |
| attswap | InfoNCE + attribute swaps (the positive control) | | c2lip |
"""
from __future__ import annotations

from typing import Any

from ..errors import UsageError
from ..plugins import load_plugins
from ..text import did_you_mean
from . import attswap, c2lip, clic, clip, hardneg, negclip, occlip, siglip
from .base import LossPart, Method, MethodFactory, NoOptions, make_options, option, require_concept_fields
from .c2lip import C2LIPLoss, ConceptLoss, concept_inputs
from .clic import CLICLoss, PairViews, cross_sentence_swap, join_pair
from .clip import CLIPLoss
from .hardneg import HardNegativeLoss, keyword_negatives
from .negclip import NegCLIPLoss, swap_negatives
from .occlip import BindingModule, OCCLIPLoss
from .siglip import SigLIPLoss

_REGISTRY: dict[str, tuple[MethodFactory, type, tuple[str, ...]]] = {}


def register_method(name: str, factory: MethodFactory, options: type = NoOptions, concept_fields: tuple[str, ...] = ()) -> None:
    """Make `factory(options, concepts=..., seed=...) -> [LossPart, ...]` available as `name`.

    `options` is a frozen dataclass whose fields (made with `base.option`) are the method's
    options: `compclip methods` lists them and `compclip train --method-opt KEY=VALUE` sets them.
    `concept_fields` are the concept-record fields its parts read ("noun_phrases", "pos", "graph"):
    a store that lacks one is refused before training, and the demo builds its store from them.
    """
    if name in _REGISTRY:
        raise ValueError(f"method {name!r} is registered already")
    _REGISTRY[name] = (factory, options, tuple(concept_fields))


def list_methods() -> list[str]:
    return sorted(_REGISTRY)


def method_options(name: str) -> type:
    """The options dataclass of a registered method."""
    return _REGISTRY[name][1]


def method_concept_fields(spec: str) -> tuple[str, ...]:
    """The concept fields a method or `+`-joined combination reads, each once, in the order the parts declare them."""
    return tuple(dict.fromkeys(f for name in spec.split("+") for f in _REGISTRY[name][2]))


def build_method(spec: str, *, concepts=None, seed: int = 0, **options: Any) -> Method:
    """Build a method from its name or a `+`-joined combination.

    `concepts` (a concept store or mapping; samples may carry their own record as `concepts`) is
    where the batch transform looks captions up, and with `seed` goes to every part; `options` are the parts'
    declared options, by key (typed values, or strings as the command line gives them). A key
    that no part declares is an error listing the valid ones.
    """
    names = spec.split("+")
    unknown = [n for n in names if n not in _REGISTRY]
    if unknown:
        hint = did_you_mean(unknown[0], list_methods(), n=2)
        raise UsageError(f"unknown method {unknown[0]!r}{hint}; known: {', '.join(list_methods())}")
    require_concept_fields(concepts, method_concept_fields(spec), spec)
    made = make_options(spec, [_REGISTRY[n][1] for n in names], options)
    parts: list[LossPart] = []
    for name, opts in zip(names, made, strict=True):
        parts += _REGISTRY[name][0](opts, concepts=concepts, seed=seed)
    return Method(spec, parts, concepts)


register_method("siglip", siglip.build)
register_method("clip", clip.build)
register_method("c2lip", c2lip.build, c2lip.Options, ("noun_phrases",))
register_method("hardneg", hardneg.build, hardneg.Options)
register_method("negclip", negclip.build, negclip.Options, ("noun_phrases", "pos"))
register_method("clic", clic.build, clic.Options, ("pos",))
register_method("occlip", occlip.build, occlip.Options, ("graph",))
register_method("attswap", attswap.build, attswap.Options, ("noun_phrases", "pos"))


load_plugins("compclip.methods")  # an installed package's entry points of this group register theirs

__all__ = ["BindingModule", "C2LIPLoss", "CLICLoss", "CLIPLoss", "ConceptLoss", "HardNegativeLoss", "LossPart", "Method",
           "NegCLIPLoss", "NoOptions", "OCCLIPLoss", "PairViews", "SigLIPLoss", "build_method", "concept_inputs", "cross_sentence_swap",
           "join_pair", "keyword_negatives", "list_methods", "method_concept_fields", "method_options", "option", "register_method",
           "swap_negatives"]
