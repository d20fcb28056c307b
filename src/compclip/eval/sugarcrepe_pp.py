"""SugarCrepe++ (Dumpala et al., 2024): P1, a paraphrase P2, and a negative N; image-to-text and text-only."""
from __future__ import annotations

from . import protocols
from .base import Benchmark, Missing, Result, mean, read_json, register
from .sugarcrepe import coco_image

SPLITS = ("replace_obj", "replace_att", "replace_rel", "swap_obj", "swap_att")
FAMILIES = {"replace": SPLITS[:3], "swap": SPLITS[3:]}


@register
class SugarCrepePP(Benchmark):
    name = "sugarcrepe_pp"
    task = "image_caption_selection"

    def required(self, root):
        return [root / "sugarcrepe_pp" / f"{s}.json" for s in SPLITS]

    def images(self, root):
        return list(dict.fromkeys(coco_image(root, r["filename"]) for s in SPLITS for r in read_json(root / "sugarcrepe_pp" / f"{s}.json")))

    def run(self, encoder, root, ties):
        missing, metrics = Missing(), {}
        for split in SPLITS:
            records = read_json(root / "sugarcrepe_pp" / f"{split}.json")
            p1, p2, n = (encoder.texts([r[k] for r in records]) for k in ("caption", "caption2", "negative_caption"))
            tot = protocols.tot((p1 * p2).sum(-1), (p1 * n).sum(-1), (p2 * n).sum(-1), ties)
            kept = [i for i, r in enumerate(records) if missing.keep([coco_image(root, r["filename"])])]
            if kept:
                images = encoder.images([coco_image(root, records[i]["filename"]) for i in kept])
                itt = protocols.itt((images * p1[kept]).sum(-1), (images * p2[kept]).sum(-1), (images * n[kept]).sum(-1), ties)
            metrics[split] = {
                "itt": itt.float().mean().item() if kept else float("nan"),
                "tot": tot.float().mean().item(),
                "n": len(records),
                "n_itt": len(kept),
            }
        for family, splits in FAMILIES.items():
            for mode in ("itt", "tot"):
                metrics[f"{family}_{mode}"] = mean(metrics[s][mode] for s in splits)
        for mode in ("itt", "tot"):
            metrics[f"overall_{mode}"] = mean(metrics[s][mode] for s in SPLITS)
        return Result(metrics, missing, self.task)
