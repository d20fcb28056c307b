"""Image-text retrieval, Recall@1/5/10 both ways (CLIP_benchmark's metric names).

Every folder under `retrieval/` is a dataset, given by one of:
- `captions.csv`: `image,caption` rows (several per image), paths relative to the folder or its `images/`;
- a Karpathy split file `dataset_*.json` (COCO 5k / Flickr30k 1k test): its `test` images;
- `long_captions.jsonl`: `{"image", "caption"}` long descriptions (DOCCI, IIW), split into sentences,
  each sentence a caption of its image.
"""
from __future__ import annotations

import csv
from pathlib import Path

import torch

from ..data import image_path
from ..errors import MissingFileError
from ..text import sentences
from . import protocols
from .base import Benchmark, Missing, Result, mean, read_json, read_jsonl, register

KS = (1, 5, 10)


def load_pairs(folder: Path) -> list[tuple[Path, str]]:
    """(image path, caption) pairs of a retrieval dataset folder."""
    if (folder / "captions.csv").is_file():
        with open(folder / "captions.csv", newline="", encoding="utf-8") as f:
            return [(image_path(folder, r["image"]), r["caption"]) for r in csv.DictReader(f)]
    karpathy = sorted(folder.glob("dataset_*.json"))
    if karpathy:
        pairs = []
        for im in read_json(karpathy[0])["images"]:
            if im.get("split") == "test":
                path = image_path(folder, str(Path(im.get("filepath", "")) / im["filename"]))
                pairs += [(path, s["raw"]) for s in im["sentences"]]
        return pairs
    if (folder / "long_captions.jsonl").is_file():
        return [(image_path(folder, r["image"]), r["caption"][a:b]) for r in read_jsonl(folder / "long_captions.jsonl")
                for a, b in sentences(r["caption"]) if b > a]
    raise MissingFileError(f"{folder}: no captions.csv, dataset_*.json or long_captions.jsonl")


@register
class Retrieval(Benchmark):
    name = "retrieval"
    task = "zeroshot_retrieval"

    def required(self, root):
        return [root / "retrieval"]

    def run(self, scorer, root, ties):
        missing, metrics = Missing(), {}
        for folder in sorted(p for p in (root / "retrieval").iterdir() if p.is_dir()):
            pairs = [(p, c) for p, c in load_pairs(folder) if missing.keep([p])]
            if not pairs:  # every image missing: nothing to rank
                recalls = {f"{d}_retrieval_recall@{k}": float("nan") for d in ("image", "text") for k in KS}
                metrics[folder.name] = {**recalls, "images": 0, "captions": 0}
                continue
            images = list(dict.fromkeys(p for p, _ in pairs))
            index = {p: i for i, p in enumerate(images)}
            owner = torch.tensor([index[p] for p, _ in pairs])
            scores = scorer.matrix(images, [c for _, c in pairs]).T  # (captions, images)
            positives = owner[:, None] == torch.arange(len(images))[None, :]
            t2i = protocols.recall_at_k(scores, positives, KS, ties)
            i2t = protocols.recall_at_k(scores.T, positives.T, KS, ties)
            metrics[folder.name] = {
                **{f"image_retrieval_recall@{k}": v for k, v in t2i.items()},
                **{f"text_retrieval_recall@{k}": v for k, v in i2t.items()},
                "images": len(images), "captions": len(pairs),
            }
        for k in KS:
            metrics[f"mean_recall@{k}"] = mean(
                (m[f"image_retrieval_recall@{k}"] + m[f"text_retrieval_recall@{k}"]) / 2 for n, m in metrics.items() if isinstance(m, dict)
            )
        return Result(metrics, missing)
