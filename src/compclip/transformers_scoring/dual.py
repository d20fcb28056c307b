"""transformers' dual encoders (`CLIPModel`, `SiglipModel`, `Siglip2Model`, `FlavaModel`) as compclip scores them: the image and text
embeddings `get_image_features` and `get_text_features` give, L2-normalised, the score their dot product, which orders
pairs as the model's own logits do (CLIP's scaled dot product, SigLIP's and SigLIP 2's scaled and shifted one). FLAVA's
features are its projection of every token: its contrastive embedding is the first (CLS) token's, as FLAVA's
global contrastive head and zero-shot read it."""
from __future__ import annotations

import hashlib
import inspect
import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..precision import autocast
from ..scoring import DualEncoderScorer, model_key


class ProcessorPixels:
    """One PIL image as the model's own processor makes its pixels, with the processor's defaults over its image
    processor's (SigLIP 2's processor asks for 256 patches whatever its image processor says); picklable, for DataLoader
    workers. A tensor, or where the processor gives more (SigLIP 2's patch mask and grid size) all it gives, by name."""

    def __init__(self, processor: Any):
        self.processor = processor

    def settings(self) -> dict[str, Any]:
        """What makes its pixels: two processors of the same class and image settings make the same tensors of an
        image (a processor's own defaults, SigLIP 2's patches, are its class's)."""
        return {"transformers": type(self.processor).__name__, "images": self.processor.image_processor.to_dict()}

    def __call__(self, image) -> torch.Tensor | dict[str, torch.Tensor]:
        made = self.processor(images=image, return_tensors="pt")
        return made["pixel_values"][0] if set(made) == {"pixel_values"} else {k: v[0] for k, v in made.items()}


def pooled(out: Any, kind: str) -> torch.Tensor:
    """The embedding in a features call's output (transformers 5 returns the whole output, 4 the tensor); FLAVA's CLS."""
    features = out if isinstance(out, torch.Tensor) else out.pooler_output
    return features[:, 0, :] if kind == "flava" else features


def processor_key(model: torch.nn.Module, processor: Any, padding: dict[str, Any]) -> str:
    """`model_key` and everything the processor changes of a feature: the image processor's settings, the tokenizer's
    vocabulary and class, the padding, transformers' version."""
    import transformers

    tokenizer = processor.tokenizer
    about = {"model": model_key(model), "images": processor.image_processor.to_dict(), "tokenizer": type(tokenizer).__name__,
             "vocab": sorted(tokenizer.get_vocab().items()), "padding": padding, "transformers": transformers.__version__}
    return hashlib.sha256(json.dumps(about, sort_keys=True, default=str).encode()).hexdigest()[:24]


class TransformersDualScorer(DualEncoderScorer):
    """A transformers dual encoder (`kind`: clip, siglip, siglip2 or flava) through its processor: images as its image
    processor makes them (SigLIP 2's at their own aspect ratio, in patches with their mask), texts tokenized in batches
    of similar length and read with their attention mask where the tokenizer gives one; SigLIP's and SigLIP 2's padded
    to the full context (`padding="max_length"`), as they were trained."""

    def __init__(self, model, processor, kind: str, device="cpu", batch_size: int = 64, workers: int = 2,
                 cache_dir: str | Path | None = None, precision: str = "fp32"):
        super().__init__(model, ProcessorPixels(processor), processor.tokenizer, device=device,
                         batch_size=batch_size, workers=workers, precision=precision)
        self.kind = kind
        length = model.config.text_config.max_position_embeddings
        self.padding = {"padding": "max_length" if kind in ("siglip", "siglip2") else True, "max_length": length, "truncation": True}
        self.cache = Path(cache_dir) / f"{processor_key(model, processor, self.padding)}-{precision}" if cache_dir else None
        self._takes = set(inspect.signature(model.get_text_features).parameters)

    def _encode_images(self, keys: list[str]) -> tuple[list[str], torch.Tensor]:
        def encode(batch: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
            out = self.model.get_image_features(**batch) if isinstance(batch, dict) else self.model.get_image_features(pixel_values=batch)
            return F.normalize(pooled(out, self.kind).float(), dim=-1)

        return self._over_images(keys, "images", encode)

    @torch.no_grad()
    def _encode_texts(self, keys: list[str]) -> tuple[list[str], torch.Tensor]:
        order = sorted(range(len(keys)), key=lambda i: len(keys[i]))  # similar lengths together: less padding
        step, rows = self.batch_size * 4, []
        for start in self._bar(range(0, len(keys), step), "texts", -(-len(keys) // step)):
            chunk = [keys[i] for i in order[start : start + step]]
            tokens = self.tokenizer(chunk, return_tensors="pt", **self.padding)
            inputs = {k: v.to(self.device) for k, v in tokens.items() if k in self._takes}
            with autocast(self.device, self.precision):
                rows.append(F.normalize(pooled(self.model.get_text_features(**inputs), self.kind).float(), dim=-1).cpu())
        rows_in_order = torch.cat(rows)
        out = torch.empty_like(rows_in_order)
        out[torch.tensor(order)] = rows_in_order  # back to the callers' order
        return keys, out
