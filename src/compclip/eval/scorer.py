"""The harness's way to a model's scorer: the method a checkpoint was trained with may bring its own."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..methods import build_method
from ..models import load_model
from ..models.checkpoint import CONFIG_NAME, load_module_weights, read_config
from ..scoring import Box, DualEncoderScorer, Image, Scorer, UnreadableImagesError

__all__ = ["Box", "DualEncoderScorer", "Image", "Scorer", "UnreadableImagesError", "load_scorer"]


def load_scorer(model: str, pretrained: str | None = None, device: str = "cpu", **settings: Any) -> Scorer:
    """The scorer of a model named as `load_model` takes it; `settings` are `DualEncoderScorer`'s (batch size, workers,
    cache, precision). A checkpoint whose method owns modules (`method.safetensors`) is scored by that method's scorer,
    its modules restored."""
    net, preprocess, tokenizer = load_model(model, pretrained, device=device)
    settings = {"device": device, **settings}
    config = read_config(model) if (Path(model) / CONFIG_NAME).is_file() else {}
    if config.get("method_weights"):
        method = build_method(config["method"], **config.get("train_args", {}).get("method_options", {})).bind(net)
        load_module_weights(method, model)
        scorer = method.to(device).eval().scorer(net, preprocess, tokenizer, **settings)
        if scorer is not None:
            return scorer
    return DualEncoderScorer(net, preprocess, tokenizer, **settings)
