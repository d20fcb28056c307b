"""COLA (Ray et al., NeurIPS 2023), its multi-object setting: two Visual Genome images whose captions bind the same kinds
of attributes and objects differently, each caption true of its own image only.

Layout: as CLIP_benchmark's `clip_benchmark/datasets/cola.py` reads it (LAION-AI/CLIP_benchmark, branch
compositionality_tasks, commit 81c19cd93cb22b9c70423852eaacb07994891942): `COLA_multiobjects_matching_benchmark.json` of
github.com/arijitray1993/COLA `data/` (commit 1fa52fba9cff4e6ffb7bfcf3550838748347273b) in `cola/`, and each image the
file links to saved beside it under the link's file name (`https://cs-people.bu.edu/array/data/vg_gqa_images/2414605.jpg`
as `cola/2414605.jpg`). A record is `[image 1 link, caption 1, image 2 link, caption 2]` (the release's README).

Rule: COLA's `scripts/eval.py` (`ColaMultiObjAcc`): right when each caption scores its own image above the other one
(`im0_c0 > im1_c0 and im1_c1 > im0_c1`), a tie wrong: CLIP_benchmark's `image_acc`. CLIP_benchmark's
`metrics/image_caption_selection.py` (same commit) also writes `text_acc` (each image scores its own caption above the
other) and `acc` (both), Winoground's text and group scores. Under `--ties clip_benchmark` the first-listed image or
caption wins a tie, as CLIP_benchmark 1.6.2's argmax does; that branch's own evaluation compares the lowest true score
with the highest false one strictly, which `--ties strict` is. A record not of the release's format (not four fields,
a caption that is not a text, a link without a file name) is skipped and named by its index.
"""
from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlparse

import torch

from .. import protocols
from ..base import Benchmark, Malformed, Missing, Result, json_records, rate, register, text_problem, well_formed
from ..items import grid_rows

FILE = "COLA_multiobjects_matching_benchmark.json"
SCORES = {"text_acc": "text", "image_acc": "image", "acc": "group"}  # CLIP_benchmark's keys: protocols.winoground's scores


@register
class Cola(Benchmark):
    name = "cola"
    task = "image_caption_selection"
    verdict = "group score"  # an item's `correct` (CLIP_benchmark's `acc`); COLA's own figure, the image score, is a column
    kind = "attribute"  # the two captions bind attributes to objects the other way round
    layout = (f"COLA: {FILE} of github.com/arijitray1993/COLA data/ in DATA_ROOT/cola/, with each image it links to "
              "saved beside it under the link's file name (DATA_ROOT/cola/2414605.jpg), as CLIP_benchmark's cola.py fetches them")
    misplaced = ((f"cola/data/{FILE}", f"the file goes directly in cola/, beside the images: move it to cola/{FILE}"),)

    def file(self, root):
        return root / self.name / FILE

    def lacks(self, root, splits):
        return self.missing_files(root, [self.file(root)])

    def records(self, root, malformed: Malformed) -> list[dict[str, Any]]:
        """The file's records, each with its index as `id` and its two images as files; one not of the release's format is
        skipped and named in `malformed`."""
        file = self.file(root)
        found = json_records(file, "a list of [image 1 link, caption 1, image 2 link, caption 2] records")
        return [{"id": k, "image_0": file.parent / link_name(link_0), "image_1": file.parent / link_name(link_1),
                 "caption_0": caption_0, "caption_1": caption_1}
                for k, (link_0, caption_0, link_1, caption_1) in well_formed(enumerate(found), record_problem, malformed, str(file))]

    def images(self, root):
        return list(dict.fromkeys(r[i] for r in self.records(root, Malformed()) for i in ("image_0", "image_1")))

    def run(self, scorer, root, ties, splits=(), options=None):
        missing, malformed = Missing.of(scorer), Malformed()
        kept = [r for r in self.records(root, malformed) if missing.keep([r["image_0"], r["image_1"]])]
        metrics, items = swap_scores(scorer, kept, ties)
        return Result(metrics, missing, malformed.named(), items)


def link_name(link: str) -> str:
    """The file name an image link is saved under (CLIP_benchmark's `os.path.basename` of the link)."""
    return PurePosixPath(urlparse(link).path).name


def record_problem(record) -> str | None:
    """Why a record is not `[image 1 link, caption 1, image 2 link, caption 2]`, or None."""
    if not isinstance(record, list) or len(record) != 4:
        return f"{record!r:.80} is not a list of 4 fields [image 1 link, caption 1, image 2 link, caption 2]"
    named = dict(zip(("image 1 link", "caption 1", "image 2 link", "caption 2"), record, strict=True))
    for key in ("image 1 link", "image 2 link"):
        if not isinstance(named[key], str) or not link_name(named[key]):
            return f"{key} is {named[key]!r}, not a link to an image file"
    return text_problem(named, "caption 1") or text_problem(named, "caption 2")


def swap_scores(scorer, kept: list[dict[str, Any]], ties: str, split: str = "") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Items of two images and their two captions (`image_0`, `image_1`, `caption_0`, `caption_1`, `id`): CLIP_benchmark's
    `text_acc`, `image_acc` and `acc` with `n`, and one row per item."""
    scores = torch.stack([  # (n, caption, image)
        torch.stack([scorer.pairs([r[f"image_{i}"] for r in kept], [r[f"caption_{c}"] for r in kept]) for i in (0, 1)], dim=-1)
        for c in (0, 1)], dim=1) if kept else torch.zeros(0, 2, 2)
    result = protocols.winoground(scores, ties)
    items = grid_rows(split, [r["id"] for r in kept], [(r["image_0"], r["image_1"]) for r in kept],
                      [(r["caption_0"], r["caption_1"]) for r in kept], scores, result["group"],
                      {"text_correct": result["text"], "image_correct": result["image"]})
    return {**{key: rate(result[score]) for key, score in SCORES.items()}, "n": len(kept)}, items
