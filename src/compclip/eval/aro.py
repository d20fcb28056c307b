"""ARO (Yuksekgonul et al., 2023): VG-Relation, VG-Attribution, COCO-Order, Flickr30k-Order.

Layout, as the authors' `dataset_zoo` downloads it, under `aro/`:
- `visual_genome_relation.json`, `visual_genome_attribution.json`: records with `image_path`
  (under `aro/images/`), `bbox_x/y/w/h` (the image is cropped to it), `true_caption`,
  `false_caption`, and `relation_name` or `attributes`;
- `coco_karpathy_test.json`, `flickr30k_test.json`: `{"image": path, "caption": [...]}` records
  (images under `coco/` and `flickr30k/`). Each caption is ranked against four shuffles of its
  own words (nouns and adjectives; everything else; within trigrams; the trigrams), seeded.
Relation and attribution report micro accuracy and the macro average over relations or
attribute pairs, as the paper does.
"""
from __future__ import annotations

import random

from ..concepts import extract
from . import protocols
from .base import Benchmark, Missing, Result, accuracy, first_option_wins, mean, read_json, register

ORDER_SETS = {"coco_order": ("coco_karpathy_test.json", "coco"), "flickr30k_order": ("flickr30k_test.json", "flickr30k")}


def shuffles(caption: str, pos: list[tuple[str, int, int, str]], seed: int) -> list[str]:
    """ARO's four order perturbations of a caption, from its words and universal POS tags."""
    rng = random.Random(seed)
    words = [w for w, _, _, p in pos if p != "PUNCT"]
    tags = [p for _, _, _, p in pos if p != "PUNCT"]

    def shuffled_at(keep) -> list[str]:
        idx = [i for i, t in enumerate(tags) if keep(t)]
        moved = idx[:]
        rng.shuffle(moved)
        out = words[:]
        for a, b in zip(idx, moved, strict=True):
            out[a] = words[b]
        return out

    trigrams = [words[i : i + 3] for i in range(0, len(words), 3)]
    within = [w for t in trigrams for w in rng.sample(t, len(t))]
    order = trigrams[:]
    rng.shuffle(order)
    options = [
        shuffled_at(lambda t: t in ("NOUN", "ADJ")),
        shuffled_at(lambda t: t not in ("NOUN", "ADJ")),
        within,
        [w for t in order for w in t],
    ]
    return [" ".join(o) for o in options]


class _VGPairs(Benchmark):
    task = "image_caption_selection"
    file = ""
    group = ""

    def required(self, root):
        return [root / "aro" / self.file]

    def images(self, root):
        return list(dict.fromkeys(root / "aro" / "images" / r["image_path"] for r in read_json(root / "aro" / self.file)))

    def run(self, scorer, root, ties):
        records = read_json(root / "aro" / self.file)
        missing = Missing()
        kept = [r for r in records if missing.keep([root / "aro" / "images" / r["image_path"]])]
        boxes = [(r["bbox_x"], r["bbox_y"], r["bbox_x"] + r["bbox_w"], r["bbox_y"] + r["bbox_h"]) for r in kept]
        images = [root / "aro" / "images" / r["image_path"] for r in kept]
        pos = scorer.pairs(images, [r["true_caption"] for r in kept], boxes)
        neg = scorer.pairs(images, [r["false_caption"] for r in kept], boxes)
        correct = protocols.pair_accuracy(pos, neg, ties)
        groups: dict[str, list[bool]] = {}
        for r, c in zip(kept, correct.tolist(), strict=True):
            key = r[self.group] if isinstance(r[self.group], str) else " / ".join(r[self.group])
            groups.setdefault(key, []).append(c)
        metrics = {**accuracy(correct), "macro": mean(sum(v) / len(v) for v in groups.values()), "groups": len(groups)}
        return Result(metrics, missing)


@register
class VGRelation(_VGPairs):
    name = "aro_vg_relation"
    file, group = "visual_genome_relation.json", "relation_name"


@register
class VGAttribution(_VGPairs):
    name = "aro_vg_attribution"
    file, group = "visual_genome_attribution.json", "attributes"


@register
class AROOrder(Benchmark):
    name = "aro_order"
    task = "image_caption_selection"
    seed = 0

    def required(self, root):
        return [root / "aro" / f for f, _ in ORDER_SETS.values() if (root / "aro" / f).exists()] or [
            root / "aro" / "coco_karpathy_test.json"
        ]

    def run(self, scorer, root, ties):
        missing, metrics = Missing(), {}
        for name, (file, image_dir) in ORDER_SETS.items():
            if not (root / "aro" / file).is_file():
                continue
            records = [r for r in read_json(root / "aro" / file) if missing.keep([root / image_dir / r["image"]])]
            pairs = [(root / image_dir / r["image"], c) for r in records for c in r["caption"]]
            tagged = extract([c for _, c in pairs], what="pos")
            options = [[c, *shuffles(c, rec["pos"], self.seed + k)] for k, ((_, c), rec) in enumerate(zip(pairs, tagged, strict=True))]
            metrics[name] = accuracy(first_option_wins(scorer, [p for p, _ in pairs], options, ties))
        metrics["overall"] = mean(m["acc"] for m in metrics.values())
        return Result(metrics, missing)
