"""Scorers of the models transformers loads (`compclip.models.hf_folders`), each through the model's own processor and
forward: CLIP, SigLIP and FLAVA as dual encoders (`dual`), BLIP's retrieval model by its ITC or ITM head (`blip`)."""
from __future__ import annotations

from typing import Any

from ..errors import UsageError
from ..models.hf_folders import TransformersModel, load_transformers
from .blip import BLIP_SCORES, BlipScorer
from .dual import TransformersDualScorer

__all__ = ["BLIP_SCORES", "BlipScorer", "TransformersDualScorer", "transformers_scorer"]


def transformers_scorer(model: TransformersModel, device: str = "cpu", blip_score: str | None = None, **settings: Any):
    """The scorer of a transformers model; `settings` are `DualEncoderScorer`'s (batch size, workers, cache, precision)."""
    if blip_score is not None and model.kind != "blip":
        raise UsageError(f"--blip-score {blip_score}: {model.name} is a {model.cls}, scored by its embeddings' dot product; "
                         "the option chooses BLIP's head")
    net, processor = load_transformers(model, device)
    if model.kind == "blip":
        return BlipScorer(net, processor, score=blip_score or BLIP_SCORES[0], device=device, **settings)
    return TransformersDualScorer(net, processor, model.kind, device=device, **settings)
