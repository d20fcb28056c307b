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
"""
from __future__ import annotations

import inspect
from typing import Any

from ..errors import UsageError
from . import c2lip, clic, clip, hardneg, negclip, siglip
from .base import LossPart, Method, MethodFactory

_REGISTRY: dict[str, MethodFactory] = {}


def register_method(name: str, factory: MethodFactory) -> None:
    """Make `factory(**options) -> [LossPart, ...]` available as `name`."""
    if name in _REGISTRY:
        raise ValueError(f"method {name!r} is registered already")
    _REGISTRY[name] = factory


def list_methods() -> list[str]:
    return sorted(_REGISTRY)


def build_method(spec: str, **options: Any) -> Method:
    """Build a method from its name or a `+`-joined combination; each factory takes the options it knows."""
    parts: list[LossPart] = []
    for name in spec.split("+"):
        if name not in _REGISTRY:
            raise UsageError(f"unknown method {name!r}; known: {', '.join(list_methods())}")
        factory = _REGISTRY[name]
        accepted = inspect.signature(factory).parameters
        parts += factory(**{k: v for k, v in options.items() if k in accepted})
    return Method(spec, parts)


register_method("siglip", siglip.build)
register_method("clip", clip.build)
register_method("c2lip", c2lip.build)
register_method("hardneg", hardneg.build)
register_method("negclip", negclip.build)
register_method("clic", clic.build)

__all__ = ["LossPart", "Method", "build_method", "list_methods", "register_method"]
