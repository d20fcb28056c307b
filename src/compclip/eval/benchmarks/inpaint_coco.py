"""InpaintCOCO (Rösch et al.): a COCO image and its inpainted twin (one object, colour or size changed), with a
caption for each; the 2×2 rule.

Layout: the Hub dataset phiyodr/inpaintCOCO downloaded into `inpaint_coco/` as it comes: `data/test-*.parquet`
with `concept`, `coco_caption`, `inpaint_caption` and the images `coco_image`, `inpaint_image` inside (read from
their bytes). Rule (the paper's, §4): correct when s(i_o, t_o) > s(i_i, t_o) and s(i_i, t_i) > s(i_o, t_i), a tie
wrong; accuracy per `concept` and over all pairs.
"""
from __future__ import annotations

import torch

from .. import protocols
from ..base import Benchmark, Missing, Result, accuracy, grouped, read_parquet, register
from ..items import grid_rows


@register
class InpaintCOCO(Benchmark):
    name = "inpaint_coco"
    task = "image_caption_selection"
    layout = ("InpaintCOCO: the Hub dataset phiyodr/inpaintCOCO downloaded into DATA_ROOT/inpaint_coco/ "
              "(`huggingface-cli download phiyodr/inpaintCOCO --repo-type dataset --local-dir DATA_ROOT/inpaint_coco`): "
              "data/test-*.parquet")
    misplaced = (("inpaint_coco/annotations.jsonl", "compclip reads the Hub's release itself (data/test-*.parquet), not an export"),)

    def shards(self, root):
        return sorted((root / "inpaint_coco" / "data").glob("test-*.parquet"))

    def lacks(self, root, splits):
        if self.shards(root):
            return None
        return self.not_found(root, f"looked for {root / 'inpaint_coco' / 'data' / 'test-*.parquet'}: not there")

    def records(self, root):
        return read_parquet(self.shards(root), ("concept", "coco_caption", "inpaint_caption"), images=("coco_image", "inpaint_image"))

    def images(self, root):
        return [r[k] for r in self.records(root) for k in ("coco_image", "inpaint_image")]

    def run(self, scorer, root, ties, splits=(), options=None):
        missing = Missing.of(scorer)
        kept = [r for r in self.records(root) if missing.keep([r["coco_image"], r["inpaint_image"]])]
        images, captions = ("coco_image", "inpaint_image"), ("coco_caption", "inpaint_caption")
        scores = torch.stack([  # (n, image, caption)
            torch.stack([scorer.pairs([r[i] for r in kept], [r[c] for r in kept]) for c in captions], dim=-1) for i in images
        ], dim=1) if kept else torch.zeros(0, 2, 2)
        correct = protocols.inpaint(scores, ties)
        items = grid_rows("", range(len(kept)), [(r["coco_image"], r["inpaint_image"]) for r in kept],
                          [(r["coco_caption"], r["inpaint_caption"]) for r in kept], scores.transpose(1, 2), correct, {})
        for row, r in zip(items, kept, strict=True):
            row["concept"] = str(r["concept"])
        return Result({**accuracy(correct), "concept": grouped(correct, [str(r["concept"]) for r in kept])}, missing, items=items)
