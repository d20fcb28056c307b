"""Zero-shot classification: prompt-ensembled class embeddings, top-1 accuracy.

Every folder under `zeroshot/` is a dataset: one sub-folder of images per class (sorted names
give the class order, as torchvision's ImageFolder), `classnames.txt` (one per line, in that
order; default: the folder names, or ImageNet's names for a folder called `imagenet`) and
`templates.txt` (one per line with `{}`; default: ImageNet's 80 templates).
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import torch

from ..errors import DataError
from . import protocols
from .base import Benchmark, Missing, Result, accuracy, mean, register

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp"}


@lru_cache(maxsize=1)
def imagenet() -> dict:
    return json.loads((Path(__file__).parent / "assets" / "imagenet.json").read_text())


def _lines(path: Path) -> list[str] | None:
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()] if path.is_file() else None


@register
class ZeroShot(Benchmark):
    name = "zeroshot"
    task = "zeroshot_classification"

    def required(self, root):
        return [root / "zeroshot"]

    def datasets(self, root) -> list[Path]:
        return sorted(p for p in (root / "zeroshot").iterdir() if p.is_dir())

    def run(self, scorer, root, ties):
        metrics = {}
        for folder in self.datasets(root):
            classes = sorted(p for p in folder.iterdir() if p.is_dir())
            default = imagenet()["classnames"] if folder.name == "imagenet" else [c.name.replace("_", " ") for c in classes]
            names = _lines(folder / "classnames.txt") or default
            templates = _lines(folder / "templates.txt") or imagenet()["templates"]
            if len(names) != len(classes):
                raise DataError(f"{folder}: {len(classes)} class folders but {len(names)} class names")
            files, labels = [], []
            for label, c in enumerate(classes):
                found = sorted(p for p in c.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
                files += found
                labels += [label] * len(found)
            correct = protocols.picks(scorer.class_scores(files, names, templates), torch.tensor(labels), ties)
            metrics[folder.name] = {**accuracy(correct), "classes": len(classes), "templates": len(templates)}
        metrics["overall"] = mean(m["acc"] for m in metrics.values())
        return Result(metrics, Missing())
