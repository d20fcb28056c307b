"""The method contract: a batch transform plus loss terms over model outputs, composable by name.

A method is a list of parts. Each part may add fields to a batch in the data loader
(`prepare`), extend the model outputs (`extend`), and turns outputs into named loss terms
(`forward`), like open_clip's losses. One part is the contrastive term (SigLIP, CLIP, or a
hard-negative InfoNCE); the others add terms (C2LIP's concept losses). In a combination
such as `c2lip+hardneg`, a contrastive part named later replaces an earlier one.

Loss terms see *local rows* (this process's images: `image_features`, `visual_tokens`,
`text_features`, `concept_features`, `concept_image`) and *global columns* (`all_*`, the
whole batch gathered over ranks with gradients), plus `image_offset` (the global index of
the first local image). Each term sums over its local rows and divides by a global count,
so the terms of all ranks add up to the full-batch loss (see `compclip.train.gather`).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..models.tokens import text_token_states, visual_token_embeddings


class LossPart(nn.Module):
    """One piece of a method. Subclasses set `name`, `contrastive` and `needs`, and implement `forward`."""

    name = ""
    contrastive = False
    # model outputs the part reads beyond image/text features: "visual_tokens", "text_states"
    needs: frozenset[str] = frozenset()
    uses_concepts = False  # reads a concept store (`compclip concepts`) in its batch transform

    def prepare(self, batch: dict[str, Any], samples: list[dict[str, Any]], tokenizer) -> None:
        """Add this part's fields to a collated batch (runs in DataLoader workers)."""

    def extend(self, model: nn.Module, batch: dict[str, Any], out: dict[str, Any]) -> None:
        """Add this part's outputs (with gradients) to `out`."""

    def forward(self, out: dict[str, Any]) -> dict[str, torch.Tensor]:
        raise NotImplementedError


class Method(nn.Module):
    """Parts combined: one batch transform, one forward, the union of their loss terms."""

    def __init__(self, name: str, parts: list[LossPart]):
        super().__init__()
        kept: list[LossPart] = []
        for part in parts:  # a later contrastive part replaces an earlier one
            if part.contrastive:
                kept = [p for p in kept if not p.contrastive]
            kept = [p for p in kept if p.name != part.name] + [part]
        if sum(p.contrastive for p in kept) != 1:
            raise ValueError(f"method {name!r} needs exactly one contrastive part, got {[p.name for p in kept]}")
        self.name = name
        self.parts = nn.ModuleList(kept)
        self.needs = frozenset().union(*(p.needs for p in kept))

    def collate(self, samples: list[dict[str, Any]], tokenizer) -> dict[str, Any]:
        """Stack images, tokenize captions, then let each part add its fields."""
        batch = {
            "image": torch.stack([s["image"] for s in samples]),
            "caption": [s["caption"] for s in samples],
            "text": tokenizer([s["caption"] for s in samples]),
        }
        for key in ("shard", "pos"):  # data-position bookkeeping for exact resume
            if key in samples[0]:
                batch[key] = torch.tensor([s[key] for s in samples])
        for part in self.parts:
            part.prepare(batch, samples, tokenizer)
        return batch

    def outputs(self, model: nn.Module, batch: dict[str, Any]) -> dict[str, Any]:
        """One forward pass of both towers, computing per-token outputs only when a part needs them."""
        out: dict[str, Any] = {}
        if "visual_tokens" in self.needs:
            pooled, out["visual_tokens"] = visual_token_embeddings(model, batch["image"])
        else:
            pooled = model.encode_image(batch["image"])
        out["image_features"] = F.normalize(pooled, dim=-1)
        if "text_states" in self.needs:
            text_pooled, out["text_states"], out["text_project"] = text_token_states(model, batch["text"])
        else:
            text_pooled = model.encode_text(batch["text"])
        out["text_features"] = F.normalize(text_pooled, dim=-1)
        out["logit_scale"] = model.logit_scale.exp()
        out["logit_bias"] = model.logit_bias
        for part in self.parts:
            part.extend(model, batch, out)
        out.pop("text_states", None)
        out.pop("text_project", None)
        return out

    def forward(self, out: dict[str, Any]) -> dict[str, torch.Tensor]:
        terms: dict[str, torch.Tensor] = {}
        for part in self.parts:
            terms.update(part(out))
        return terms


def sigmoid_pairs_loss(logits: torch.Tensor, positive: torch.Tensor, count: int) -> torch.Tensor:
    """−Σ log σ(z·logits) / count with z = +1 on `positive` pairs and −1 elsewhere."""
    z = positive.to(logits.dtype) * 2 - 1
    return -F.logsigmoid(z * logits).sum() / count


def image_rows(out: dict[str, Any], n: int, device) -> torch.Tensor:
    """Global indices of the local image rows."""
    return torch.arange(n, device=device) + out.get("image_offset", 0)


MethodFactory = Callable[..., list[LossPart]]
