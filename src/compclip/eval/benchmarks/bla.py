"""BLA (Chen et al., EMNLP 2023): one image and four captions of one linguistic construction, two true and two false;
three tasks: active-passive voice, coordination, relative clauses.

Layout: the release's `BLA_benchmark.zip` (github.com/shin-ee-chen/BLA `dataset/README.md`, commit
812685baa0c621d7fc0a4a4f4574336a63334d69: a Dropbox link, no checksum) unzipped into `bla/`, as CLIP_benchmark's
`clip_benchmark/datasets/bla.py` reads it (LAION-AI/CLIP_benchmark, branch compositionality_tasks, commit
81c19cd93cb22b9c70423852eaacb07994891942): `bla/BLA_benchmark/annotations/<task>.json`, a list of
`{image_id, caption_group: [{True1, True2, False1, False2, ...}]}`, and `bla/BLA_benchmark/images/<image_id>.jpg`.

Rule: CLIP_benchmark's `metrics/image_caption_selection.py` (same commit) on the captions [True1, True2, False1,
False2]: right when the lower of the true captions' scores is above the higher of the false ones', a tie wrong; its
`acc` and `text_acc` (the same figure: one image). Its `image_acc` is 1 by construction with one image (no other image
to prefer) and is not written. Also BLA's own `caption_acc`, the mean over items of `get_accuracy` in
`evaluation_models/clip/utils.py`: the share of the four captions the image's ranking puts in their half (true in the
top two, false in the bottom two), a tie ranking the false caption first. Under `--ties clip_benchmark` a tie goes to the
first-listed caption (a true one), as CLIP_benchmark 1.6.2's argmax does. A record not of the release's format (no image
id, a caption group without the four captions as texts) is skipped and named by its index under its task.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .. import protocols
from ..base import Benchmark, Malformed, Missing, Result, json_records, rate, register, text_problem, well_formed
from ..items import choice_rows

TASKS = ("active_passive_captions", "coordination_captions", "relative_clause_captions")
CAPTIONS = ("True1", "True2", "False1", "False2")  # the trues first, as CLIP_benchmark's `match` lists them


@register
class Bla(Benchmark):
    name = "bla"
    task = "image_caption_selection"
    splits = TASKS
    layout = ("BLA: the release's BLA_benchmark.zip (github.com/shin-ee-chen/BLA dataset/README.md links it) unzipped into "
              "DATA_ROOT/bla/: DATA_ROOT/bla/BLA_benchmark/annotations/<task>.json and DATA_ROOT/bla/BLA_benchmark/images/")
    misplaced = (("bla/annotations", "unzip BLA_benchmark.zip into bla/ so that its folder BLA_benchmark/ holds annotations/ and images/"),
                 ("BLA_benchmark", "the unzipped folder goes in bla/: move it to bla/BLA_benchmark/"))

    def base(self, root: Path) -> Path:
        return root / self.name / "BLA_benchmark"

    def file(self, root: Path, task: str) -> Path:
        return self.base(root) / "annotations" / f"{task}.json"

    def lacks(self, root, splits):
        files = [self.file(root, t) for t in splits or self.splits]
        return None if any(f.is_file() for f in files) else self.missing_files(root, files)

    def records(self, root: Path, task: str, malformed: Malformed) -> list[dict[str, Any]]:
        """The task's records, each with its index as `id`, its image file and its four captions, trues first; one not of
        the release's format is skipped and named in `malformed` under its task."""
        file = self.file(root, task)
        found = json_records(file, "a list of {image_id, caption_group} records")
        return [{"id": k, "image": self.base(root) / "images" / f"{record['image_id']}.jpg",
                 "captions": [record["caption_group"][0][c] for c in CAPTIONS]}
                for k, record in well_formed(enumerate(found), record_problem, malformed, str(file), task)]

    def images(self, root):
        present = [t for t in self.splits if self.file(root, t).is_file()]
        return list(dict.fromkeys(r["image"] for t in present for r in self.records(root, t, Malformed())))

    def run(self, scorer, root, ties, splits=(), options=None):
        missing, malformed, metrics, items = Missing.of(scorer), Malformed(), {}, []
        chosen = splits or self.splits
        absent = {str(self.file(root, t)): "absent: task not scored" for t in chosen if not self.file(root, t).is_file()}
        for task in (t for t in chosen if self.file(root, t).is_file()):
            scorer.at(task)
            records = self.records(root, task, malformed)
            kept = [r for r in records if missing.keep([r["image"]])]
            scores = torch.stack([scorer.pairs([r["image"] for r in kept], [r["captions"][c] for r in kept]) for c in range(4)],
                                 dim=1) if kept else torch.zeros(0, 4)
            correct = trues_above_falses(scores, ties)
            metrics[task] = {"acc": rate(correct), "text_acc": rate(correct), "caption_acc": caption_accuracy(scores, ties),
                             "n": len(kept), "n_missing": len(records) - len(kept)}
            items += choice_rows(task, [r["id"] for r in kept], [r["image"] for r in kept], [r["captions"] for r in kept],
                                 scores, correct, n_true=2)
        absent.update(malformed.named(chosen))
        return Result(metrics, missing, absent, items)


def record_problem(record) -> str | None:
    """Why a record is not `{image_id, caption_group: [{True1, True2, False1, False2}]}`, or None."""
    if not isinstance(record, dict):
        return f"a {type(record).__name__}, not a record object"
    image = record.get("image_id")
    if isinstance(image, bool) or not isinstance(image, (str, int)) or not str(image).strip():
        return f"image_id is {image!r}, not an image's id" if "image_id" in record else "no image_id"
    group = record.get("caption_group")
    if not isinstance(group, list) or not group or not isinstance(group[0], dict):
        return f"caption_group is {group!r:.80}, not a list holding a caption object" if "caption_group" in record else "no caption_group"
    return next((why for why in (text_problem(group[0], c) for c in CAPTIONS) if why), None)


def trues_above_falses(scores: torch.Tensor, ties: str) -> torch.Tensor:
    """Each item (rows of scores of True1, True2, False1, False2): whether each true caption beats both false ones."""
    return protocols.picks(scores[:, [0, 2, 3]], 0, ties) & protocols.picks(scores[:, [1, 2, 3]], 0, ties)


def caption_accuracy(scores: torch.Tensor, ties: str) -> float:
    """BLA's `get_accuracy` averaged over items: the share of captions in their half of the image's ranking (true ones in
    the top two); among equal scores the false caption ranks first (`strict`) or the first-listed (`clip_benchmark`)."""
    protocols.check_ties(ties)
    shares = []
    for row in scores.tolist():
        order = sorted(range(4), key=lambda c: (-row[c], -c if ties == "strict" else c))
        in_place = sum(1 for rank, c in enumerate(order) if (rank < 2) == (c < 2))
        shares.append(in_place / 4)
    return sum(shares) / len(shares) if shares else float("nan")
