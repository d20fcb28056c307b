"""SugarCrepe (Hsieh et al., 2023): one image, a true and a false caption; 7 splits in 3 families."""
from __future__ import annotations

from pathlib import Path

from . import protocols
from .base import Benchmark, Missing, Result, accuracy, mean, read_json, register

SPLITS = ("add_obj", "add_att", "replace_obj", "replace_att", "replace_rel", "swap_obj", "swap_att")
FAMILIES = {"add": SPLITS[:2], "replace": SPLITS[2:5], "swap": SPLITS[5:]}


def coco_image(root: Path, filename: str) -> Path:
    return root / "coco" / "val2017" / filename


@register
class SugarCrepe(Benchmark):
    name = "sugarcrepe"
    task = "image_caption_selection"
    splits = SPLITS

    def records(self, root: Path, split: str) -> list[dict]:
        return list(read_json(root / self.name / f"{split}.json").values())  # keys "0".."N", maybe gapped

    def required(self, root):
        return [root / self.name / f"{s}.json" for s in self.splits]

    def images(self, root):
        return list(dict.fromkeys(coco_image(root, r["filename"]) for s in self.splits for r in self.records(root, s)))

    def run(self, scorer, root, ties):
        missing, metrics = Missing(), {}
        for split in SPLITS:
            records = self.records(root, split)
            kept = [r for r in records if missing.keep([coco_image(root, r["filename"])])]
            images = [coco_image(root, r["filename"]) for r in kept]
            pos = scorer.pairs(images, [r["caption"] for r in kept])
            neg = scorer.pairs(images, [r["negative_caption"] for r in kept])
            metrics[split] = {**accuracy(protocols.pair_accuracy(pos, neg, ties)), "n_missing": len(records) - len(kept)}
        for family, splits in FAMILIES.items():
            metrics[family] = mean(metrics[s]["acc"] for s in splits)
        metrics["overall"] = mean(metrics[s]["acc"] for s in SPLITS)
        return Result(metrics, missing)
