"""VL-CheckList (Zhao et al., 2022): positive against negative captions, by Attribute, Object and Relation.

Layout: `vl_checklist/<Category>/**/*.json` (the authors' annotation files), each a list of
`[image_path, {"POS": [...], "NEG": [...]}]`, image paths relative to `vl_checklist/images/`.
Each POS caption is paired with the NEG caption at the same position; a pair is correct when the
image prefers POS. Categories average their files, as the authors' evaluation does.
"""
from __future__ import annotations

from . import protocols
from .base import Benchmark, Missing, Result, mean, read_json, register


@register
class VLCheckList(Benchmark):
    name = "vl_checklist"
    task = "image_caption_selection"

    def required(self, root):
        return [root / "vl_checklist"]

    def run(self, scorer, root, ties):
        base, missing, metrics = root / "vl_checklist", Missing(), {}
        for category in sorted(p for p in base.iterdir() if p.is_dir() and p.name != "images"):
            scores = []
            for file in sorted(category.rglob("*.json")):
                pairs = [
                    (base / "images" / image, p, n)
                    for image, caps in read_json(file)
                    for p, n in zip(caps["POS"], caps["NEG"], strict=False)  # the k-th POS against the k-th NEG, as VL-CheckList does
                ]
                pairs = [x for x in pairs if missing.keep([x[0]])]
                if not pairs:
                    continue
                images = [i for i, _, _ in pairs]
                pos = scorer.pairs(images, [p for _, p, _ in pairs])
                neg = scorer.pairs(images, [n for _, _, n in pairs])
                acc = protocols.pair_accuracy(pos, neg, ties).float().mean().item()
                metrics[f"{category.name}/{file.relative_to(category).with_suffix('')}"] = {"acc": acc, "n": len(pairs)}
                scores.append(acc)
            metrics[category.name] = mean(scores)
        metrics["overall"] = mean(v for k, v in metrics.items() if "/" not in k)
        return Result(metrics, missing)
