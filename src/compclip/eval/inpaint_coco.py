"""InpaintCOCO (Rösch et al.): a COCO image and its inpainted twin (one object, colour or size changed),
with a caption for each; the 2×2 rule. Layout: `inpaint_coco/annotations.jsonl` with `coco_image`,
`inpaint_image` (paths under `inpaint_coco/`), `coco_caption`, `inpaint_caption` and `category`."""
from __future__ import annotations

import torch

from . import protocols
from .base import Benchmark, Missing, Result, accuracy, mean, read_jsonl, register


@register
class InpaintCOCO(Benchmark):
    name = "inpaint_coco"
    task = "image_caption_selection"

    def required(self, root):
        return [root / "inpaint_coco" / "annotations.jsonl"]

    def run(self, scorer, root, ties):
        base = root / "inpaint_coco"
        records = read_jsonl(base / "annotations.jsonl")
        missing = Missing()
        kept = [r for r in records if missing.keep([base / r["coco_image"], base / r["inpaint_image"]])]
        images, captions = ("coco_image", "inpaint_image"), ("coco_caption", "inpaint_caption")
        scores = torch.stack([  # (n, image, caption)
            torch.stack([scorer.pairs([base / r[i] for r in kept], [r[c] for r in kept]) for c in captions], dim=-1) for i in images
        ], dim=1)
        correct = protocols.inpaint(scores, ties)
        metrics = {}
        for category in sorted({r.get("category", "all") for r in kept}):
            mask = torch.tensor([r.get("category", "all") == category for r in kept])
            metrics[category] = accuracy(correct[mask])
        metrics["overall"] = mean(m["acc"] for m in metrics.values())
        return Result(metrics, missing)
