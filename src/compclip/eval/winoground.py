"""Winoground (Thrush et al., 2022): 2 images × 2 captions with the same words; text, image, group scores.

Layout (the Hugging Face release, facebook/winoground): `winoground/examples.jsonl` with
`id`, `image_0`, `image_1`, `caption_0`, `caption_1`, and `winoground/images/<image>.png`.
"""
from __future__ import annotations

import torch

from . import protocols
from .base import Benchmark, Missing, Result, read_jsonl, register


@register
class Winoground(Benchmark):
    name = "winoground"
    task = "image_caption_selection"

    def required(self, root):
        return [root / "winoground" / "examples.jsonl"]

    @staticmethod
    def records(root):
        return read_jsonl(root / "winoground" / "examples.jsonl")

    @staticmethod
    def image(root, record, i):
        return root / "winoground" / "images" / f"{record[f'image_{i}']}.png"

    def images(self, root):
        return [self.image(root, r, i) for r in self.records(root) for i in (0, 1)]

    def run(self, scorer, root, ties):
        records = self.records(root)
        image = lambda r, i: self.image(root, r, i)  # noqa: E731
        missing = Missing()
        kept = [r for r in records if missing.keep([image(r, 0), image(r, 1)])]
        scores = torch.stack([  # (n, caption, image)
            torch.stack([scorer.pairs([image(r, i) for r in kept], [r[f"caption_{c}"] for r in kept]) for i in (0, 1)], dim=-1)
            for c in (0, 1)
        ], dim=1)
        result = protocols.winoground(scores, ties)
        metrics = {k: v.float().mean().item() for k, v in result.items()}
        metrics["n"] = len(kept)
        return Result(metrics, missing)
