"""What'sUp (Kamath et al., 2023): spatial relations, one true caption against three or one false.

Layout: the `data/` folder of the repository (github.com/amitakamath/whatsup_vlms, README "Downloading the data";
the Google Drive folder holds the same files) as it is, in `whatsup/`: `controlled_images_dataset.json` with
`controlled_images/` (subset A), `controlled_clevr_dataset.json` with `controlled_clevr/` (B),
`coco_qa_{one,two}_obj.json` with `val2017/` (COCO-spatial; or the shared `coco/val2017/`), and
`vg_qa_{one,two}_obj.json` with `vg_images/` (GQA-spatial).

Rule: `dataset_zoo/aro_datasets.py` (`Controlled_Images`, `COCO_QA`, `VG_QA`, `evaluate_scores`): the argmax over
the caption options with the true caption first, so a tie goes to it (`clip_benchmark` ties); accuracy and
accuracy per preposition for each subset; for A and B, pair accuracy (both of left/right, both of on/under or
in-front/behind, of one object pair right) and set accuracy (all four), the paper's Table 3. The Table 1
figures average subsets: COCO-spatial and GQA-spatial the one- and two-object subsets. An absent subset is named
and the others stand.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ...errors import DataError
from ..base import Benchmark, Missing, Result, acc_of, accuracy, first_option_wins, grouped, mean, mean_present, read_json, register
from ..items import choice_rows

SUBSETS = {  # split: (annotation file, image folder or None for COCO's, Table-1 group)
    "controlled_a": ("controlled_images_dataset.json", "controlled_images", "controlled_a"),
    "controlled_b": ("controlled_clevr_dataset.json", "controlled_clevr", "controlled_b"),
    "coco_one_obj": ("coco_qa_one_obj.json", None, "coco_spatial"),
    "coco_two_obj": ("coco_qa_two_obj.json", None, "coco_spatial"),
    "gqa_one_obj": ("vg_qa_one_obj.json", "vg_images", "gqa_spatial"),
    "gqa_two_obj": ("vg_qa_two_obj.json", "vg_images", "gqa_spatial"),
}
PREPOSITIONS = {  # evaluate_scores' labels: (substring, label) tried in order, then the last branch's label
    "controlled_a": ((("left_of", "left_of"), ("right_of", "right_of"), ("_on_", "on")), "under"),
    "controlled_b": ((("left_of", "left_of"), ("right_of", "right_of"), ("_in-front_of_", "in-front_of")), "behind"),
    "coco_two_obj": ((("left of", "left"), ("right of", "right"), ("above", "above")), "below"),
    "gqa_two_obj": ((("left of", "left"), ("right of", "right"), ("front of", "front"), ("behind", "behind")), "top"),
}


def item_id(record) -> str:
    """An item as its subset's file names it: the COCO or Visual Genome image id (first field), the image path of a
    controlled set's record."""
    return str(record[0]) if isinstance(record, list) else record["image_path"]


def preposition(split: str, record) -> str:
    """The record's preposition as `aro_datasets.py` labels it: from the image name (controlled sets), the true
    caption's last word (one-object sets) or the relation it names (two-object sets)."""
    if split.endswith("one_obj"):
        return record[1].split()[-1]
    text = record["image_path"] if split.startswith("controlled") else record[1]
    rules, otherwise = PREPOSITIONS[split]
    return next((label for key, label in rules if key in text), otherwise)


def pair_and_set(names: list[str], correct: list[bool], subset: str) -> dict[str, float]:
    """Controlled sets: each object pair has four images (`a_left_of_b.jpeg`, ...). Pair accuracy: of each pair's two
    opposite relations, both right; set accuracy: all four right. Keys as `evaluate_scores` builds them."""
    axes = (("left", "right"), ("on", "under") if subset == "controlled_a" else ("in-front", "behind"))
    sets: dict[tuple[str, str], dict[str, bool]] = defaultdict(dict)
    for name, ok in zip(names, correct, strict=True):
        parts = Path(name).name.split("_")
        if len(parts) < 3:
            raise DataError(f"What'sUp {subset}: image {name} is not named object_relation_object.jpeg")
        sets[(parts[0], parts[-1][:-5])][parts[1]] = ok
    pairs = [all(s[r] for r in axis) for s in sets.values() for axis in axes if all(r in s for r in axis)]
    full = [all(s.values()) for s in sets.values() if len(s) == 4]
    return {"pair_acc": mean(pairs), "pairs": len(pairs), "set_acc": mean(full), "sets": len(full)}


@register
class WhatsUp(Benchmark):
    name = "whatsup"
    task = "image_caption_selection"
    ties = "clip_benchmark"
    splits = tuple(SUBSETS)
    spectrum = "whatsup"  # the mean of the six subsets
    kind = "relation"  # every option is the caption with another spatial preposition (left of, on, under, ...)
    layout = ("What'sUp: the data/ folder of github.com/amitakamath/whatsup_vlms (README 'Downloading the data', or its Google Drive "
              "folder) as it is in DATA_ROOT/whatsup/: the subsets' JSON files beside controlled_images/, controlled_clevr/, "
              "val2017/ and vg_images/")
    misplaced = (("whatsup/data/controlled_images_dataset.json", "DATA_ROOT/whatsup is the repository's data/ folder itself"),)

    def spectrum_parts(self, metrics):
        return [acc_of(metrics, s) for s in self.splits]

    def lacks(self, root, splits):
        wanted = [root / "whatsup" / SUBSETS[s][0] for s in splits or self.splits]
        return None if self.present(root, splits) else self.missing_files(root, wanted)

    def present(self, root: Path, splits) -> list[str]:
        return [s for s in splits or self.splits if (root / "whatsup" / SUBSETS[s][0]).is_file()]

    def examples(self, root: Path, split: str) -> list[tuple[Path, list[str], object]]:
        """(image, caption options with the true one first, record) of a subset, image paths as `aro_datasets.py` opens them."""
        base, (file, folder, _) = root / "whatsup", SUBSETS[split]
        records = read_json(base / file)
        if split.startswith("controlled"):  # image_path is relative to the repository: "data/controlled_images/..."
            return [(base / r["image_path"].removeprefix("data/"), r["caption_options"], r) for r in records]
        if folder is None:
            coco = base / "val2017" if (base / "val2017").is_dir() else root / "coco" / "val2017"
            return [(coco / f"{int(r[0]):012d}.jpg", [r[1], r[2]], r) for r in records]
        return [(base / folder / f"{r[0]}.jpg", [r[1], r[2]], r) for r in records]

    def images(self, root):
        return [image for split in self.present(root, ()) for image, _, _ in self.examples(root, split)]

    def run(self, scorer, root, ties, splits=(), options=None):
        missing, metrics, items = Missing.of(scorer), {}, []
        present = self.present(root, splits)
        absent = {str(root / "whatsup" / SUBSETS[s][0]): f"absent: subset {s} not scored"
                  for s in splits or self.splits if s not in present}
        for split in present:
            scorer.at(split)
            kept = [e for e in self.examples(root, split) if missing.keep([e[0]])]
            correct, scores = first_option_wins(scorer, [image for image, _, _ in kept], [opts for _, opts, _ in kept], ties)
            items += choice_rows(split, [item_id(r) for _, _, r in kept], [image for image, _, _ in kept],
                                 [opts for _, opts, _ in kept], scores, correct)
            metrics[split] = {**accuracy(correct), "prepositions": grouped(correct, [preposition(split, r) for _, _, r in kept])}
            if split.startswith("controlled"):
                metrics[split].update(pair_and_set([r["image_path"] for _, _, r in kept], correct.tolist(), split))
        groups = defaultdict(list)  # Table 1: each figure over its subsets present
        for split in present:
            groups[SUBSETS[split][2]].append(metrics[split]["acc"])
        table = {group: mean_present(values) for group, values in groups.items()}
        metrics.update({g: v for g, v in table.items() if g not in metrics})  # the controlled sets are their own figure
        metrics["overall"] = mean_present(table.values())
        return Result(metrics, missing, absent, items)
