"""SugarCrepe++ (Dumpala et al., 2024): P1, a paraphrase P2, and a negative N; image-to-text and text-only."""
from __future__ import annotations

from . import protocols
from .base import Missing, Result, mean, read_json, register
from .sugarcrepe import SPLITS as SUGARCREPE_SPLITS
from .sugarcrepe import SugarCrepe, coco_image

SPLITS = tuple(s for s in SUGARCREPE_SPLITS if not s.startswith("add_"))  # SugarCrepe++ has no add splits
FAMILIES = {"replace": SPLITS[:3], "swap": SPLITS[3:]}


@register
class SugarCrepePP(SugarCrepe):
    """The annotation files and images are laid out as SugarCrepe's; each file is a list of records."""

    name = "sugarcrepe_pp"
    splits = SPLITS

    def records(self, root, split):
        return read_json(root / self.name / f"{split}.json")

    def run(self, encoder, root, ties):
        missing, metrics = Missing(), {}
        for split in SPLITS:
            records = self.records(root, split)
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
        return Result(metrics, missing)
