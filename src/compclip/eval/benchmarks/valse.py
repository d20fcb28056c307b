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
compclip's choice is this mean). An instrument whose file is absent or not the official `{sample id: sample}` object
is named and not scored; its images not there are counted as missing, by instrument. A sample not of the official
format (no `mturk`, where the repository's loop raises; `caption`, `foil` or `image_file` not a text; votes that are
not a count of the three annotators) is skipped and named by instrument and key.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ...errors import DataError
from .. import protocols
from ..base import (
    Benchmark,
    Malformed,
    Missing,
    Result,
    acc_of,
    accuracy,
    integer_problem,
    json_records,
    mean_present,
    register,
    text_problem,
    well_formed,
)
from ..download import Asset
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
KINDS = {"existence": "negation", "plurals": "counting", "counting_hard": "counting", "counting_small": "counting",
         "counting_adversarial": "counting", "relations": "spatial", "actant_swap": "relation", "foil_it": "object"}  # else: the words
ANNOTATORS = 3
VALIDATED = 2  # of the three annotators, at least this many chose the caption and not the foil (README: "valid foils")
SOURCE = "https://raw.githubusercontent.com/Heidelberg-NLP/VALSE/2152d90d4aecd11f7f74cf03420abcb63efff9c5/data"
SHA256 = {  # the files at that commit
    "actant-swap.json": "915294ac3ade7c4c067b1c6841d0db93b60cb8a61ac8e2fb6b125c2a1c0ca93a",
    "action-replacement.json": "336ba134f29a3475d0508809067218909a6bd30f079c59309d19244eccb7917f",
    "coreference-hard.json": "ef54d8d971d9e0f264e07de08d9915c6e3d6129a2f239888f2b938f5c2eb4139",
    "coreference-standard.json": "dae1d9eb018acb54e29a1c4983f3563f86ec3b6beb4037a261564270b0473e95",
    "counting-adversarial.json": "0d23529308449c98b37a91048a865a5f377325eceb9accd73f2947bc512d12b0",
    "counting-hard.json": "2cc83615653675fb50914ce2d8ab4041cce1278eed7ac0abf6f319dbce5c967a",
    "counting-small-quant.json": "ca0645885b05738f6c6df2dffec70c669aaff64114017f33425821faab4bc374",
    "existence.json": "b20fca52eba86c544083d423345a2e28e60e601ef61c56c9ac1c73a95a3a6d18",
    "foil-it.json": "6f6f0d7494271ed28f6e6f075c3ba36ba1bc45d00ecf7403920f060915130460",
    "plurals.json": "43760db7fc8c6f2a21d3536d52f81539cb101f3370e8d2effb09de43d91486a3",
    "relations.json": "061fc557459c318ccd6734d07c21cfa5bf5ae87aa6b1110b8f5ec3d6b2911043",
}


@register
class VALSE(Benchmark):
    name = "valse"
    task = "image_caption_selection"
    splits = tuple(INSTRUMENTS)
    spectrum = "valse"  # the mean of the seven pieces, each the mean of its instruments
    layout = ("VALSE: github.com/Heidelberg-NLP/VALSE cloned into DATA_ROOT/valse/ (its data/*.json: `compclip data download "
              "valse`), each instrument's images, from its own source (Visual7W, COCO 2017, SWiG, VisDial: docs/data.md), where "
              "its config.py puts them under DATA_ROOT/valse/data/ (visual7w/images, plurals/test_images, relations/test_images, "
              "actions/images_512, coref/...), FOIL-it!'s COCO val2014 in DATA_ROOT/coco/val2014/")
    misplaced = (("valse/existence.json", "the instrument files go in valse/data/, as the repository lays them out"),)
    assets = tuple(Asset(f"{SOURCE}/{file}", f"valse/data/{file}", sha) for file, sha in SHA256.items())  # the JSONs; not the images

    def spectrum_parts(self, metrics):
        pieces = [s for s in self.splits if not any(s in members for members in PIECES.values())] + list(PIECES)
        complete = all(acc_of(metrics, s) is not None for s in self.splits)
        return [acc_of(metrics, piece) if complete else None for piece in pieces]

    def kind_of(self, split):
        return KINDS.get(split)

    def file(self, root: Path, split: str) -> Path:
        return root / self.name / "data" / INSTRUMENTS[split][0]

    def image(self, root: Path, split: str, record: dict) -> Path:
        folder = INSTRUMENTS[split][1]
        base = root / "coco" / "val2014" if folder is None else root / self.name / "data" / folder
        return base / record["image_file"]

    def records(self, root: Path, split: str, malformed: Malformed) -> list[dict]:
        """The instrument's validated samples, each with its key in the file as `id`; a sample not of the official format
        is skipped and named in `malformed`."""
        file = self.file(root, split)
        found = json_records(file, "the official {sample id: sample} object", dict)
        return [{"id": key, **record} for key, record in well_formed(found.items(), sample_problem, malformed, f"{file} [{split}]", split)
                if record["mturk"]["caption"] >= VALIDATED]

    def present(self, root: Path, splits: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
        chosen = splits or self.splits
        absent = {str(self.file(root, s)): "absent: instrument not scored" for s in chosen if not self.file(root, s).is_file()}
        return [s for s in chosen if self.file(root, s).is_file()], absent

    def lacks(self, root, splits):
        present, _ = self.present(root, splits)
        return None if present else self.missing_files(root, [self.file(root, s) for s in splits or self.splits])

    def images(self, root):
        return list(dict.fromkeys(self.image(root, s, r) for s in self.present(root, ())[0]
                                  for r in self.records(root, s, Malformed())))

    def run(self, scorer, root, ties, splits=(), options=None):
        missing, metrics, items, malformed = Missing.of(scorer), {}, [], Malformed()
        present, absent = self.present(root, splits)
        read = {}
        for split in present:
            try:
                read[split] = self.records(root, split, malformed)
            except DataError as e:  # this instrument's file alone: the others are scored
                absent[str(self.file(root, split))] = f"unusable, instrument not scored: {e}"
        for split, records in read.items():
            scorer.at(split)
            kept = [r for r in records if missing.keep([self.image(root, split, r)])]
            images = [self.image(root, split, r) for r in kept]
            texts = [(r["caption"], r["foil"]) for r in kept]
            scores = torch.stack([scorer.pairs(images, [t[k] for t in texts]) for k in (0, 1)], dim=1) if kept else torch.zeros(0, 2)
            correct = protocols.pair_accuracy(scores[:, 0], scores[:, 1], ties)
            metrics[split] = {**accuracy(correct), "n_missing": len(records) - len(kept)}
            items += choice_rows(split, [r["id"] for r in kept], images, texts, scores, correct)
        for split in read:  # an instrument none of whose images is there is named, its accuracy NaN, never 0
            if not metrics[split]["n"]:  # by instrument: several share an image folder
                absent[f"{self.image(root, split, {'image_file': ''})} [{split}]"] = f"no image of {split} found: not scored"
        for piece, members in (*PIECES.items(), ("overall", self.splits)):
            if any(s in read and metrics[s]["n"] for s in members):
                metrics[piece] = mean_present(metrics[s]["acc"] for s in members if s in read)
        absent.update(malformed.named())
        return Result(metrics, missing, absent, items)


def sample_problem(record) -> str | None:
    """Why a sample is not of the official format (`caption`, `foil`, `image_file` texts, `mturk` the annotators'
    votes), or None."""
    if not isinstance(record, dict):
        return f"a {type(record).__name__}, not a sample object"
    for key in ("caption", "foil", "image_file"):
        why = text_problem(record, key)
        if why:
            return why
    if "mturk" not in record:
        return "no mturk (the annotators' votes, which decide whether the foil is valid)"
    if not isinstance(record["mturk"], dict):
        return f"mturk is {record['mturk']!r}, not the annotators' votes {{caption, foil, other}}"
    why = integer_problem(record["mturk"], "caption", ANNOTATORS + 1)
    return f"mturk: {why}" if why else None
