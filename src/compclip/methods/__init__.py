"""Fine-tuning methods behind one contract (`base.Method`), registered by name like timm's models: each is one module
here that ends with `register_method(...)`; `base.METHODS` imports them all, and installed plugins' (entry-point group
`compclip.methods`), on its first read.

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
| ceclip | InfoNCE + relation swaps | L_cmr, L_imc | c2lip (replacing SigLIP) |
| svlc | InfoNCE + rule-based word swaps | the negatives' cross-entropy | c2lip (replacing SigLIP) |
| dac | InfoNCE + word-list negatives | MIL over dense captions, negative term | c2lip (replacing SigLIP) |
| tripletclip | InfoNCE + negative captions, over (image, caption) and (negative image, negative caption) | | c2lip (replacing SigLIP) |
| conclip | InfoNCE + negated captions and distractor images (image tower frozen) | the distractors' term | c2lip (replacing SigLIP) |
"""
from __future__ import annotations

from typing import Any

from .base import METHODS, LossPart, Method, MethodEntry, NoOptions, make_options, option, register_method, require_concept_fields
from .c2lip import C2LIPLoss, ConceptLoss, concept_inputs
from .ceclip import CECLIPLoss, relation_negative
from .clic import CLICLoss, PairViews, cross_sentence_swap, join_pair
from .clip import CLIPLoss
from .conclip import CoNCLIPLoss
from .dac import DACLoss, word_list_negative
from .hardneg import HardNegativeLoss, keyword_negatives
from .negclip import NegCLIPLoss, swap_negatives
from .occlip import BindingModule, OCCLIPLoss
from .siglip import SigLIPLoss
from .svlc import SVLCLoss, rule_based_negatives
from .tripletclip import TripletCLIPLoss


def list_methods() -> list[str]:
    return METHODS.names()


def method_options(name: str) -> type:
    """The options dataclass of a registered method."""
    return METHODS[name].options


def method_concept_fields(spec: str) -> tuple[str, ...]:
    """The concept fields a method or `+`-joined combination reads, each once, in the order the parts declare them."""
    return tuple(dict.fromkeys(f for name in spec.split("+") for f in METHODS[name].concept_fields))


def build_method(spec: str, *, concepts=None, seed: int = 0, **options: Any) -> Method:
    """Build a method from its name or a `+`-joined combination.

    `concepts` (a concept store or mapping; samples may carry their own record as `concepts`) is
    where the batch transform looks captions up, and with `seed` goes to every part; `options` are the parts'
    declared options, by key (typed values, or strings as the command line gives them). A key
    that no part declares is an error listing the valid ones.
    """
    entries = [METHODS[name] for name in spec.split("+")]  # an unknown name is refused with the known ones
    require_concept_fields(concepts, method_concept_fields(spec), spec)
    made = make_options(spec, [entry.options for entry in entries], options)
    parts: list[LossPart] = []
    for entry, opts in zip(entries, made, strict=True):
        parts += entry.build(opts, concepts=concepts, seed=seed)
    return Method(spec, parts, concepts)


__all__ = ["METHODS", "BindingModule", "C2LIPLoss", "CECLIPLoss", "CLICLoss", "CLIPLoss", "CoNCLIPLoss", "ConceptLoss", "DACLoss",
           "HardNegativeLoss", "LossPart", "Method", "MethodEntry", "NegCLIPLoss", "NoOptions", "OCCLIPLoss", "PairViews", "SVLCLoss",
           "SigLIPLoss", "TripletCLIPLoss", "build_method", "concept_inputs", "cross_sentence_swap", "join_pair", "keyword_negatives",
           "list_methods", "method_concept_fields", "method_options", "option", "register_method", "relation_negative",
           "rule_based_negatives", "swap_negatives", "word_list_negative"]
