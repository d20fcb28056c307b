"""The harness's way to a model's scorer: the method a checkpoint was trained with may bring its own."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..methods import build_method
from ..models import load_model
from ..models.checkpoint import CONFIG_NAME, load_module_weights, model_name, read_config
from ..models.hf_folders import transformers_model
from ..scoring import Box, DualEncoderScorer, Image, Scorer, UnreadableImagesError

if TYPE_CHECKING:
    from .pixels import SweepPixels

__all__ = ["Box", "DualEncoderScorer", "Image", "Scorer", "UnreadableImagesError", "load_scorer", "model_scorer"]


def load_scorer(model: str, pretrained: str | None = None, device: str = "cpu", blip_score: str | None = None,
                pixels: SweepPixels | None = None, **settings: Any) -> Scorer:
    """The scorer of a model named as `load_model` takes it, or of a transformers model (its folder, `hf:ORG/NAME`:
    `compclip.transformers_scoring`, BLIP by `blip_score`); `settings` are `DualEncoderScorer`'s (batch size, workers,
    cache, precision). A checkpoint whose method owns modules (`method.safetensors`) is scored by that method's scorer,
    its modules restored. `pixels`: a sweep's decoded images, which the scorer shares with the sweep's other models of
    its preprocessing (told here, where the preprocessing is made: by its parameters)."""
    model = model_name(model)
    hf = transformers_model(model)
    if hf is not None:
        if pretrained:
            raise UsageError(f"{model} is a transformers model: it brings its own weights, drop --pretrained {pretrained}")
        from ..transformers_scoring import transformers_scorer

        scorer = transformers_scorer(hf, device=device, blip_score=blip_score, **settings)
        if pixels is not None:
            scorer.pixels = pixels.of(scorer.preprocess.settings())
        return scorer
    if blip_score is not None:
        raise UsageError(f"--blip-score {blip_score} chooses a BLIP retrieval model's head; {model} is an open_clip model")
    net, preprocess, tokenizer = load_model(model, pretrained, device=device)
    config = read_config(model) if (Path(model) / CONFIG_NAME).is_file() else {}
    method = None
    if config.get("method_weights"):
        method = build_method(config["method"], **config.get("train_args", {}).get("method_options", {})).bind(net)
        load_module_weights(method, model)
        method.to(device).eval()
    scorer = model_scorer(net, preprocess, tokenizer, method, device=device, **settings)
    if pixels is not None:  # `preprocess` is open_clip's evaluation transform of this config (`eval_preprocess`), no more
        scorer.pixels = pixels.of({"open_clip_eval": dict(net.visual.preprocess_cfg)})
    return scorer


def model_scorer(net, preprocess, tokenizer, method=None, **settings: Any) -> Scorer:
    """The scorer of a model in memory: its method's own where the method brings one (OC-CLIP's structured score), else
    the dual encoder's."""
    scorer = method.scorer(net, preprocess, tokenizer, **settings) if method is not None else None
    return scorer if scorer is not None else DualEncoderScorer(net, preprocess, tokenizer, **settings)
