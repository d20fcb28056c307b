"""SugarCrepe++ (Dumpala et al., 2024): P1, a paraphrase P2, and a negative N; image-to-text and text-only."""
from __future__ import annotations

from . import protocols
from .base import NOT_APPLICABLE, Missing, Result, mean, read_json, register
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

    def run(self, scorer, root, ties):
        missing, metrics = Missing(), {}
        for split in SPLITS:
            records = self.records(root, split)
            p1, p2, n = ([r[k] for r in records] for k in ("caption", "caption2", "negative_caption"))
            p1_p2 = scorer.text_pairs(p1, p2)
            tot = None if p1_p2 is None else protocols.tot(p1_p2, scorer.text_pairs(p1, n), scorer.text_pairs(p2, n), ties)
            kept = [i for i, r in enumerate(records) if missing.keep([coco_image(root, r["filename"])])]
            if kept:
                images = [coco_image(root, records[i]["filename"]) for i in kept]
                p1k, p2k, nk = ([texts[i] for i in kept] for texts in (p1, p2, n))
                itt = protocols.itt(scorer.pairs(images, p1k), scorer.pairs(images, p2k), scorer.pairs(images, nk), ties)
            metrics[split] = {
                "itt": itt.float().mean().item() if kept else float("nan"),
                "tot": NOT_APPLICABLE if tot is None else tot.float().mean().item(),
                "n": len(records),
                "n_itt": len(kept),
            }
        for family, splits in (*FAMILIES.items(), ("overall", SPLITS)):
            for mode in ("itt", "tot"):
                values = [metrics[s][mode] for s in splits]
                metrics[f"{family}_{mode}"] = NOT_APPLICABLE if NOT_APPLICABLE in values else mean(values)
        return Result(metrics, missing)
