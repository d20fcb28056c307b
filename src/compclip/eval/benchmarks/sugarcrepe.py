"""SugarCrepe (Hsieh et al., 2023): one image, a true and a false caption; 7 splits in 3 families.

Layout: the 7 files of the sugar-crepe repository's `data/` in `sugarcrepe/` (`compclip data download
sugarcrepe`), COCO val2017 in `coco/val2017/`. Rule: sugar-crepe's `main_eval.py` (`text_retrieval`): correct
when s(I, true) > s(I, false), a tie wrong. Families and `overall` average the splits present; an absent
split file is named.
"""
from __future__ import annotations

import functools
from pathlib import Path

import torch

from .. import protocols
from ..base import Benchmark, Malformed, Missing, Result, accuracy, json_records, mean, register, text_problem, well_formed
from ..download import Asset
from ..items import choice_rows

SPLITS = ("add_obj", "add_att", "replace_obj", "replace_att", "replace_rel", "swap_obj", "swap_att")
FAMILIES = {"add": SPLITS[:2], "replace": SPLITS[2:5], "swap": SPLITS[5:]}
KINDS = {"att": "attribute", "obj": "object", "rel": "relation"}  # a split's last part: what its false captions change
SOURCE = "https://raw.githubusercontent.com/RAIVNLab/sugar-crepe/main/data"
# each split file of RAIVNLab/sugar-crepe's data/ (main): its SHA-256, which `compclip data download` checks and
# `report --paper` holds a result's files against, and its records (a result of fewer is marked a subset)
SHA256 = {
    "add_att": "012d88d729693d193760e6f3393b06a1cf874380a9db0062e937201199fe044d",
    "add_obj": "1b9d76b93139a937b8dc1ada92a4f05ecc821bb3c291d752428bafadd4bb0682",
    "replace_att": "9fe55fd4c0a9ad1f85d486d9f6d0215b41f867eb025026e7f7b5ce44352545ee",
    "replace_obj": "9d299600639947e9d15281a9ded1382b376cf4ea088a8d08a1314bfe76e81898",
    "replace_rel": "356bcc2fc4c6aed3f4d9fd50acc58489bb1fe70c28791f9368d4cbf9ea39cdc9",
    "swap_att": "7a7ce04e5c4c80412b48c6f0c1347fb1a2f5d54c0be6aa429b64d390e442f8d0",
    "swap_obj": "073cdb8e253d053614e80710834d9773b09dbc1dd0a412f6f9492262caa1dcad",
}

ITEMS = {"add_att": 692, "add_obj": 2062, "replace_att": 788, "replace_obj": 1652, "replace_rel": 1406, "swap_att": 666,
         "swap_obj": 245}


@functools.lru_cache(maxsize=1 << 16)
def coco_image(root: Path, filename: str) -> Path:
    """A COCO val2017 image's file, made once: each is named by many records (1,560 images for SugarCrepe's 7,512)."""
    return root / "coco" / "val2017" / filename


@register
class SugarCrepe(Benchmark):
    name = "sugarcrepe"
    task = "image_caption_selection"
    splits = SPLITS
    families = FAMILIES
    averaged = (("acc", ""),)  # each split metric the families and `overall` average, with the suffix of their names
    fields = ("filename", "caption", "negative_caption")  # each record's texts, as the release's main_eval.py reads them
    spectrum = "sugarcrepe"  # the mean of add, replace and swap, each the accuracy over all its items
    layout = ("SugarCrepe: the 7 split files of github.com/RAIVNLab/sugar-crepe data/ in DATA_ROOT/sugarcrepe/ "
              "(`compclip data download sugarcrepe`), COCO val2017 images in DATA_ROOT/coco/val2017/")
    assets = tuple(Asset(f"{SOURCE}/{split}.json", f"sugarcrepe/{split}.json", sha) for split, sha in SHA256.items())
    columns = (("SC add", ("add",)), ("SC replace", ("replace",)), ("SC swap", ("swap",)), ("SC swap-att", ("swap_att",)))
    release_sha256, release_items = SHA256, ITEMS  # each split file's in the release

    def spectrum_parts(self, metrics):
        parts = []
        for members in self.families.values():
            scored = [metrics.get(s) for s in members]
            parts.append(None if any(m is None or not m.get("n") for m in scored)
                         else sum(m["acc"] * m["n"] for m in scored) / sum(m["n"] for m in scored))
        return parts

    def kind_of(self, split):
        return KINDS.get(split.rpartition("_")[2])

    def splits_of(self, paths: tuple[str, ...]) -> list[str]:
        """The splits the metrics at `paths` average: a split's own ("swap_att", "swap_att.itt"), a family's members
        ("add", "replace_itt"), or all of them ("overall")."""
        found = []
        for path in paths:
            name = path.split(".")[0].removesuffix("_itt").removesuffix("_tot")
            found += [name] if name in self.splits else list(self.families.get(name, self.splits if name == "overall" else ()))
        return list(dict.fromkeys(found))

    def release(self, paths):
        return {f"{self.name}/{split}.json": (self.release_sha256[split], self.release_items[split]) for split in self.splits_of(paths)}

    def items_read(self, metrics, paths):
        """The records of each split file read: those scored (`n`) and those whose image was missing (`n_missing`)."""
        counts = [metrics.get(split) for split in self.splits_of(paths)]
        if not counts or any(not isinstance(c, dict) or not isinstance(c.get("n"), int) for c in counts):
            return None
        return sum(c["n"] + c.get("n_missing", 0) for c in counts)

    def file(self, root: Path, split: str) -> Path:
        return root / self.name / f"{split}.json"

    def records(self, root: Path, split: str, malformed: Malformed) -> list[dict]:
        """The split's records, each with its key in the file ("0".."N", maybe gapped) as `id`; one without a text in
        each of `fields` is skipped and named in `malformed` under its split."""
        file = self.file(root, split)
        found = json_records(file, "sugar-crepe's {record id: record} object", dict)
        return [{"id": key, **record} for key, record in well_formed(found.items(), self.record_problem, malformed, str(file), split)]

    def record_problem(self, record) -> str | None:
        """Why a record is not an object with a text in each of the release's `fields`, or None."""
        if not isinstance(record, dict):
            return f"a {type(record).__name__}, not a record object"
        return next((why for why in (text_problem(record, key) for key in self.fields) if why), None)

    def lacks(self, root, splits):
        present = [s for s in splits or self.splits if self.file(root, s).is_file()]
        return None if present else self.missing_files(root, [self.file(root, s) for s in splits or self.splits])

    def present(self, root: Path, splits: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
        """The selected splits whose file is there, and the absent ones named."""
        chosen = splits or self.splits
        absent = {str(self.file(root, s)): "absent: split not scored" for s in chosen if not self.file(root, s).is_file()}
        return [s for s in chosen if self.file(root, s).is_file()], absent

    def images(self, root):
        return list(dict.fromkeys(coco_image(root, r["filename"]) for s in self.present(root, ())[0]
                                  for r in self.records(root, s, Malformed())))

    def run(self, scorer, root, ties, splits=(), options=None):
        missing, malformed, metrics, items = Missing.of(scorer), Malformed(), {}, []
        present, absent = self.present(root, splits)
        for split in present:
            scorer.at(split)
            metrics[split], rows = self.score(scorer, root, split, self.records(root, split, malformed), missing, ties)
            items += rows
        for key, suffix in self.averaged:
            self.average(metrics, key, present, suffix)
        absent.update(malformed.named(tuple(present)))
        return Result(metrics, missing, absent, items)

    def score(self, scorer, root: Path, split: str, records: list[dict], missing: Missing, ties: str) -> tuple[dict, list[dict]]:
        """A split's metrics and item rows: each record whose image is there, its caption against its negative one."""
        kept = [r for r in records if missing.keep([coco_image(root, r["filename"])])]
        images = [coco_image(root, r["filename"]) for r in kept]
        texts = [(r["caption"], r["negative_caption"]) for r in kept]
        scores = torch.stack([scorer.pairs(images, [t[k] for t in texts]) for k in (0, 1)], dim=1) if kept else torch.zeros(0, 2)
        correct = protocols.pair_accuracy(scores[:, 0], scores[:, 1], ties)
        rows = choice_rows(split, [r["id"] for r in kept], images, texts, scores, correct)
        return {**accuracy(correct), "n_missing": len(records) - len(kept)}, rows

    def average(self, metrics: dict, key: str, present: list[str], suffix: str = "") -> None:
        """Each family with a split present, and `overall`, as the mean of its present splits' `key`."""
        for family, members in (*self.families.items(), ("overall", self.splits)):
            values = [metrics[s][key] for s in members if s in present]
            if values:
                metrics[f"{family}{suffix}"] = values[0] if isinstance(values[0], str) else mean(values)
