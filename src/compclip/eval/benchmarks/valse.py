"""VALSE (Parcalabescu et al., ACL 2022): one image, a caption and a foil, in 11 instruments of 6 linguistic pieces.

Layout: the Heidelberg-NLP/VALSE repository cloned into `valse/` (its `data/*.json`, one file an instrument), the
images where the repository's `config.py` (`DATA`) puts them, each instrument's source under `valse/data/`: Visual7W's
`visual7w/images/` (existence, counting), `plurals/test_images/` and `relations/test_images/` (COCO 2017 images),
SWiG's `actions/images_512/` (actions), VisDial's `coref/release_too_many_is_this_in_color/images/` and
`coref/release_v18/test_images/` (coreference), and COCO val2014 for FOIL-it! (`config.py` points at a COCO
val2014 folder of the user's: compclip's `coco/val2014/`).

Rule: the repository's evaluation scripts (`lxmert_valse_eval.py`, the loop over `DATA`): only the samples its
annotators validated, `mturk["caption"] >= 2` ("valid foils", README), and the pairwise accuracy acc_r: correct when
the caption scores higher than the foil (`cross_score[0, 1] > cross_score[1, 1]`: a tie wrong). The pieces average
their instruments (counting, actions, coreference) and `overall` the instruments present, unweighted (the paper's
Table 2 prints the instruments; how a single VALSE number is formed from them is not published by the authors, and
compclip's choice is this mean). An instrument whose file is absent is named and not scored; its images not there are
counted as missing, by instrument.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .. import protocols
from ..base import Benchmark, Missing, Result, accuracy, mean_present, read_json, register
from ..items import choice_rows

# instrument: (its file under valse/data/, its images' folder under valse/data/ or None for COCO val2014 under the root)
INSTRUMENTS = {
    "existence": ("existence.json", "visual7w/images"),
    "plurals": ("plurals.json", "plurals/test_images"),
    "counting_hard": ("counting-hard.json", "visual7w/images"),
    "counting_small": ("counting-small-quant.json", "visual7w/images"),
    "counting_adversarial": ("counting-adversarial.json", "visual7w/images"),
    "relations": ("relations.json", "relations/test_images"),
    "action_replacement": ("action-replacement.json", "actions/images_512"),
    "actant_swap": ("actant-swap.json", "actions/images_512"),
    "coreference_standard": ("coreference-standard.json", "coref/release_too_many_is_this_in_color/images"),
    "coreference_hard": ("coreference-hard.json", "coref/release_v18/test_images"),
    "foil_it": ("foil-it.json", None),
}
PIECES = {"counting": ("counting_hard", "counting_small", "counting_adversarial"), "actions": ("action_replacement", "actant_swap"),
          "coreference": ("coreference_standard", "coreference_hard")}
KINDS = {"relations": "relation", "actant_swap": "relation", "foil_it": "object"}  # the others: read from the words
VALIDATED = 2  # of the three annotators, at least this many chose the caption and not the foil (README: "valid foils")


@register
class VALSE(Benchmark):
    name = "valse"
    task = "image_caption_selection"
    splits = tuple(INSTRUMENTS)
    layout = ("VALSE: github.com/Heidelberg-NLP/VALSE cloned into DATA_ROOT/valse/ (its data/*.json), each instrument's "
              "images where its config.py puts them under DATA_ROOT/valse/data/ (visual7w/images, plurals/test_images, "
              "relations/test_images, actions/images_512, coref/...), FOIL-it!'s COCO val2014 in DATA_ROOT/coco/val2014/")
    misplaced = (("valse/existence.json", "the instrument files go in valse/data/, as the repository lays them out"),)

    def kind_of(self, split):
        return KINDS.get(split)

    def file(self, root: Path, split: str) -> Path:
        return root / self.name / "data" / INSTRUMENTS[split][0]

    def image(self, root: Path, split: str, record: dict) -> Path:
        folder = INSTRUMENTS[split][1]
        base = root / "coco" / "val2014" if folder is None else root / self.name / "data" / folder
        return base / record["image_file"]

    def records(self, root: Path, split: str) -> list[dict]:
        """The instrument's validated samples, each with its key in the file as `id`."""
        found = read_json(self.file(root, split))
        return [{"id": key, **r} for key, r in found.items() if r.get("mturk", {}).get("caption", 0) >= VALIDATED]

    def present(self, root: Path, splits: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
        chosen = splits or self.splits
        absent = {str(self.file(root, s)): "absent: instrument not scored" for s in chosen if not self.file(root, s).is_file()}
        return [s for s in chosen if self.file(root, s).is_file()], absent

    def lacks(self, root, splits):
        present, _ = self.present(root, splits)
        return None if present else self.missing_files(root, [self.file(root, s) for s in splits or self.splits])

    def images(self, root):
        return list(dict.fromkeys(self.image(root, s, r) for s in self.present(root, ())[0] for r in self.records(root, s)))

    def run(self, scorer, root, ties, splits=(), options=None):
        missing, metrics, items = Missing.of(scorer), {}, []
        present, absent = self.present(root, splits)
        for split in present:
            scorer.at(split)
            records = self.records(root, split)
            kept = [r for r in records if missing.keep([self.image(root, split, r)])]
            images = [self.image(root, split, r) for r in kept]
            texts = [(r["caption"], r["foil"]) for r in kept]
            scores = torch.stack([scorer.pairs(images, [t[k] for t in texts]) for k in (0, 1)], dim=1) if kept else torch.zeros(0, 2)
            correct = protocols.pair_accuracy(scores[:, 0], scores[:, 1], ties)
            metrics[split] = {**accuracy(correct), "n_missing": len(records) - len(kept)}
            items += choice_rows(split, [r["id"] for r in kept], images, texts, scores, correct)
        for split in present:  # an instrument none of whose images is there is named, its accuracy NaN, never 0
            if not metrics[split]["n"]:
                absent[str(self.image(root, split, {"image_file": ""}))] = f"no image of {split} found: not scored"
        for piece, members in (*PIECES.items(), ("overall", self.splits)):
            if any(s in present and metrics[s]["n"] for s in members):
                metrics[piece] = mean_present(metrics[s]["acc"] for s in members if s in present)
        return Result(metrics, missing, absent, items)
