"""Winoground (Thrush et al., 2022): 2 images × 2 captions with the same words; text, image and group scores.

Layout: the Hub dataset facebook/winoground downloaded into `winoground/` as it comes: today `data/test-*.parquet`
(images inside, read from their bytes), earlier `data/examples.jsonl` with `data/images.zip` unzipped into
`data/images/` (`examples.jsonl` and `images/` directly under `winoground/` are read too). Rule: the dataset
card's and the paper's: text correct when each image scores its own caption higher, image when each caption
scores its own image higher, group both; a tie wrong. Also per `collapsed_tag` (Object, Relation, Both), `tag`,
`num_main_preds` and each `secondary_tag` (the paper's Tables 3-5).
"""
from __future__ import annotations

import torch

from .. import protocols
from ..base import Benchmark, Missing, Result, acc_of, rate, read_jsonl, read_parquet, register
from ..items import grid_rows

COLUMNS = ("id", "caption_0", "caption_1", "tag", "secondary_tag", "num_main_preds", "collapsed_tag")
GROUPS = ("collapsed_tag", "tag", "num_main_preds", "secondary_tag")


@register
class Winoground(Benchmark):
    name = "winoground"
    verdict = "group score"  # an item's `correct`; the text and image scores are its other columns
    task = "image_caption_selection"
    spectrum = "winoground"  # the group score
    layout = ("Winoground: the Hub dataset facebook/winoground downloaded into DATA_ROOT/winoground/ "
              "(`huggingface-cli download facebook/winoground --repo-type dataset --local-dir DATA_ROOT/winoground`), "
              "data/test-*.parquet, or the older data/examples.jsonl with data/images.zip unzipped into data/images/")
    misplaced = (("winoground/test-00000-of-00001.parquet", "the Parquet shards go in winoground/data/, as the Hub lays them out"),)

    def spectrum_parts(self, metrics):
        return [acc_of(metrics, "group")]

    def parquet(self, root):
        return sorted((root / "winoground" / "data").glob("test-*.parquet"))

    def jsonl(self, root):
        return next((p for p in (root / "winoground" / "data" / "examples.jsonl", root / "winoground" / "examples.jsonl")
                     if p.is_file()), None)

    def lacks(self, root, splits):
        if self.parquet(root) or self.jsonl(root):
            return None
        base = root / "winoground"
        looked = f"looked for {base / 'data' / 'test-*.parquet'} and {base / 'data' / 'examples.jsonl'}: neither is there"
        return self.not_found(root, looked)

    def records(self, root) -> list[dict]:
        """Each example with `image_0`, `image_1` as images (Parquet cells or files beside the JSONL)."""
        shards = self.parquet(root)
        if shards:
            return read_parquet(shards, COLUMNS, images=("image_0", "image_1"))
        file = self.jsonl(root)
        records = read_jsonl(file)
        for r in records:
            for i in (0, 1):
                r[f"image_{i}"] = file.parent / "images" / f"{r[f'image_{i}']}.png"
        return records

    def images(self, root):
        return [r[f"image_{i}"] for r in self.records(root) for i in (0, 1)]

    def run(self, scorer, root, ties, splits=(), options=None):
        missing = Missing.of(scorer)
        kept = [r for r in self.records(root) if missing.keep([r["image_0"], r["image_1"]])]
        scores = torch.stack([  # (n, caption, image)
            torch.stack([scorer.pairs([r[f"image_{i}"] for r in kept], [r[f"caption_{c}"] for r in kept]) for i in (0, 1)], dim=-1)
            for c in (0, 1)
        ], dim=1) if kept else torch.zeros(0, 2, 2)
        result = protocols.winoground(scores, ties)
        items = grid_rows("", [r.get("id", k) for k, r in enumerate(kept)], [(r["image_0"], r["image_1"]) for r in kept],
                          [(r["caption_0"], r["caption_1"]) for r in kept], scores, result["group"],
                          {"text_correct": result["text"], "image_correct": result["image"]})
        metrics = {k: rate(v) for k, v in result.items()}
        metrics["n"] = len(kept)
        for group in GROUPS:
            labels = [tags(r.get(group), group) for r in kept]
            for label in sorted({t for ls in labels for t in ls}):
                mask = torch.tensor([label in ls for ls in labels], dtype=torch.bool)
                scored = {score: rate(v[mask]) for score, v in result.items()}
                metrics.setdefault(group, {})[label] = {**scored, "n": int(mask.sum())}
        return Result(metrics, missing, items=items)


def tags(value, group: str) -> list[str]:
    """An example's labels in `group`: secondary tags are a space- or comma-separated list, the others one label."""
    if value is None or value == "":
        return []
    if group == "secondary_tag":
        return [t for t in str(value).replace(",", " ").split() if t]
    return [str(value)]
