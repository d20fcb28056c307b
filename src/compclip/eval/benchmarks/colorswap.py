"""ColorSwap (Burapacheep et al., 2024): two generated images and two captions of the same words, the colour words
attached to the other objects; each caption true of its own image only.

Layout: the Hub dataset stanfordnlp/colorswap (gated: accept its terms, then `huggingface-cli download
stanfordnlp/colorswap --repo-type dataset --local-dir DATA_ROOT/colorswap`), its test split's Parquet shards
`data/test-*.parquet` (images inside, read from their bytes), as CLIP_benchmark's `clip_benchmark/datasets/colorswap.py`
loads it (`load_dataset("stanfordnlp/colorswap")["test"]`: `image_1`, `image_2`, `caption_1`, `caption_2`;
LAION-AI/CLIP_benchmark, branch compositionality_tasks, commit 81c19cd93cb22b9c70423852eaacb07994891942); or the
release's own copy (github.com/Top34051/colorswap README, commit 4f2c9e40ab4cf9db9e4c7b89410d0b15dccb404a): `test.json`
in `colorswap/` with `images.zip` unzipped beside it (`image_1` names `images/img_0_1.png`, relative to `colorswap/`).

Rule: Winoground's, as CLIP_benchmark's `metrics/image_caption_selection.py` (same commit) writes it and the paper
reports it: `text_acc` when each image scores its own caption above the other, `image_acc` when each caption scores its
own image above the other, `acc` both; a tie wrong (the release's image-text matching code is a Colab notebook, not in
the repository: not read). Under `--ties clip_benchmark` the first-listed image or caption wins a tie, as CLIP_benchmark
1.6.2's argmax does. A record not of the release's format (a caption that is not a text, an image not named by a path)
is skipped and named by its index.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import DataError
from ..base import Benchmark, Malformed, Missing, Result, read_json, read_parquet, register, text_problem
from .cola import swap_scores

CAPTIONS = ("caption_1", "caption_2")
IMAGES = ("image_1", "image_2")


@register
class ColorSwap(Benchmark):
    name = "colorswap"
    task = "image_caption_selection"
    verdict = "group score"  # an item's `correct` (CLIP_benchmark's `acc`); the text and image scores are its other columns
    kind = "attribute"  # the colour words swapped between the objects
    layout = ("ColorSwap: the Hub dataset stanfordnlp/colorswap downloaded into DATA_ROOT/colorswap/ (`huggingface-cli download "
              "stanfordnlp/colorswap --repo-type dataset --local-dir DATA_ROOT/colorswap`), data/test-*.parquet; or the "
              "release's test.json in DATA_ROOT/colorswap/ with images.zip unzipped beside it (DATA_ROOT/colorswap/images/)")
    misplaced = (("colorswap/test-00000-of-00001.parquet", "the Parquet shards go in colorswap/data/, as the Hub lays them out"),
                 ("colorswap/data/test.json", "the release's test.json goes directly in colorswap/, with images/ beside it"))

    def parquet(self, root: Path) -> list[Path]:
        return sorted((root / self.name / "data").glob("test-*.parquet"))

    def json(self, root: Path) -> Path:
        return root / self.name / "test.json"

    def lacks(self, root, splits):
        if self.parquet(root) or self.json(root).is_file():
            return None
        looked = f"looked for {root / self.name / 'data' / 'test-*.parquet'} and {self.json(root)}: neither is there"
        return self.not_found(root, looked)

    def records(self, root: Path, malformed: Malformed) -> list[dict[str, Any]]:
        """The test split's records as `image_0`, `image_1`, `caption_0`, `caption_1` and `id` (the Parquet's row or the
        JSON's index); one not of the release's format is skipped and named in `malformed`."""
        shards = self.parquet(root)
        if shards:
            rows = read_parquet(shards, CAPTIONS, images=IMAGES)
            place = f"{shards[0].parent / 'test-*.parquet'}"
        else:
            place = str(self.json(root))
            rows = read_json(self.json(root))
            if not isinstance(rows, list):
                raise DataError(f"{place}: not a list of {{{', '.join((*CAPTIONS, *IMAGES))}}} records")
        records = []
        for k, row in enumerate(rows):
            why = record_problem(row, from_json=not shards)
            if why:
                malformed.skip(place, k, why)
                continue
            images = [row[i] if shards else self.json(root).parent / row[i] for i in IMAGES]
            records.append({"id": row.get("id", k), "image_0": images[0], "image_1": images[1],
                            "caption_0": row["caption_1"], "caption_1": row["caption_2"]})
        return records

    def images(self, root):
        return [r[i] for r in self.records(root, Malformed()) for i in ("image_0", "image_1")]

    def run(self, scorer, root, ties, splits=(), options=None):
        missing, malformed = Missing.of(scorer), Malformed()
        kept = [r for r in self.records(root, malformed) if missing.keep([r["image_0"], r["image_1"]])]
        metrics, items = swap_scores(scorer, kept, ties)
        return Result(metrics, missing, malformed.named(), items)


def record_problem(record, from_json: bool) -> str | None:
    """Why a record is not of the release's format, or None: its captions texts and, in the JSON, its images paths."""
    if not isinstance(record, dict):
        return f"a {type(record).__name__}, not a record object"
    if from_json:
        for image in IMAGES:
            if not isinstance(record.get(image), str) or not record[image].strip():
                return f"{image} is {record.get(image)!r}, not an image's path" if image in record else f"no {image}"
    return text_problem(record, "caption_1") or text_problem(record, "caption_2")
