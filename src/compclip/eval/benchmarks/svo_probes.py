"""SVO-Probes (Hendricks & Nematzadeh, 2021): one sentence, a true and a false image that differs in its subject, verb
or object.

Layout: the google-deepmind/svo_probes repository's `svo_probes.csv` in `svo_probes/` (columns `sentence`,
`pos_image_id`, `neg_image_id`, `subj_neg`, `verb_neg`, `obj_neg`, with `pos_url`, `neg_url` and the triplets), and the
images, which the release gives only as URLs (`image_urls.txt`; many no longer answer), downloaded by the user into
`svo_probes/images/` named by their id: `<pos_image_id>.jpg` (or `.png`, `.jpeg`, `.webp`).

Rule: the release's notebook (`probing_image_text_models.ipynb`) sorts the rows by the kind of their negative, each
subset holding the rows where that flag alone is set (`subj_neg & ~obj_neg & ~verb_neg`, ...), and reports each subset
and `All`, the rows of the three together. Its models classify each (sentence, image) pair as a match or not; a
dual encoder has no threshold, so compclip scores each row as the sentence choosing between its two images: correct
when s(true image, sentence) > s(false image, sentence) (a tie wrong), the image side of the probe as vl_compo's sweep
reads it. `subj`, `verb`, `obj`, and `overall` over every row of the three (the notebook's `All`: a micro average).
Rows whose images are not there are counted missing per subset; a subset with no image found is named, not scored 0.
The CSV is read as the notebook's pandas reads it (UTF-8, a field of any length); a row not of its format (cut short,
bytes that are not UTF-8, an empty sentence or image id, a flag neither True nor False) is skipped and named by its
line, under its subset where its flags tell it.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .. import protocols
from ..base import Benchmark, Malformed, Missing, Result, acc_of, accuracy, read_csv, register, text_problem
from ..items import image_choice_rows

SPLITS = {"subj": "subj_neg", "verb": "verb_neg", "obj": "obj_neg"}  # each subset: the rows whose negative is of that kind alone
EXTENSIONS = (".jpg", ".png", ".jpeg", ".webp")
COLUMNS = ("sentence", "pos_image_id", "neg_image_id", *SPLITS.values())


@register
class SVOProbes(Benchmark):
    name = "svo_probes"
    task = "image_caption_selection"  # CLIP_benchmark's name for a choice among pairs
    splits = tuple(SPLITS)
    spectrum = "svo_probes"  # the mean of the subject, verb and object negatives
    layout = ("SVO-Probes: svo_probes.csv of github.com/google-deepmind/svo_probes in DATA_ROOT/svo_probes/, its images "
              "(URLs in image_urls.txt) downloaded into DATA_ROOT/svo_probes/images/<image id>.jpg")

    def spectrum_parts(self, metrics):
        return [acc_of(metrics, s) for s in self.splits]

    def kind_of(self, split):
        return "object" if split in ("subj", "obj") else None

    def file(self, root: Path) -> Path:
        return root / self.name / "svo_probes.csv"

    def lacks(self, root, splits):
        return self.missing_files(root, [self.file(root)])

    def image(self, root: Path, image_id: str) -> Path:
        folder = root / self.name / "images"
        return next((folder / f"{image_id}{e}" for e in EXTENSIONS if (folder / f"{image_id}{e}").is_file()), folder / f"{image_id}.jpg")

    def rows(self, root: Path, malformed: Malformed) -> dict[str, list[dict]]:
        """The CSV's rows by subset (the notebook's filters), each with its row's index as `id`; a row not of the file's
        format is skipped and named in `malformed`."""
        file = self.file(root)
        subsets: dict[str, list[dict]] = {s: [] for s in SPLITS}
        for index, (line, row, why) in enumerate(read_csv(file, COLUMNS)):
            flags = {} if row is None else {s: (row.get(column) or "").strip().lower() for s, column in SPLITS.items()}
            on = [s for s, flag in flags.items() if flag == "true"]
            subset = on[0] if len(on) == 1 else None  # the notebook's filters: one kind of negative alone
            why = why or row_problem(row, flags)
            if why:
                malformed.skip(f"{file} [{subset}]" if subset else str(file), f"at line {line}", why, subset)
            elif subset:
                subsets[subset].append({"id": index, **row})
        return subsets

    def images(self, root):
        rows = self.rows(root, Malformed())
        return list(dict.fromkeys(self.image(root, r[k]) for subset in rows.values() for r in subset
                                  for k in ("pos_image_id", "neg_image_id")))

    def run(self, scorer, root, ties, splits=(), options=None):
        missing, metrics, items, absent, malformed = Missing.of(scorer), {}, [], {}, Malformed()
        rows = self.rows(root, malformed)
        together = []
        for split in splits or self.splits:
            scorer.at(split)
            pairs = [(self.image(root, r["pos_image_id"]), self.image(root, r["neg_image_id"])) for r in rows[split]]
            kept = [(r, pair) for r, pair in zip(rows[split], pairs, strict=True) if missing.keep(list(pair))]
            sentences = [r["sentence"] for r, _ in kept]
            scores = torch.stack([scorer.pairs([pair[k] for _, pair in kept], sentences) for k in (0, 1)], dim=1) if kept \
                else torch.zeros(0, 2)
            correct = protocols.pair_accuracy(scores[:, 0], scores[:, 1], ties)
            metrics[split] = {**accuracy(correct), "n_missing": len(rows[split]) - len(kept)}
            if not kept:
                absent[f"{self.file(root)} [{split}]"] = f"no image of the {split} subset found: not scored"
            together.append(correct)
            items += image_choice_rows(split, [r["id"] for r, _ in kept], [pair for _, pair in kept], sentences, scores.tolist(),
                                       [0] * len(kept), correct)
        everything = torch.cat(together)
        if everything.numel():
            metrics["overall"] = accuracy(everything)["acc"]
        absent.update(malformed.named(splits))
        return Result(metrics, missing, absent, items)


def row_problem(row: dict[str, str], flags: dict[str, str]) -> str | None:
    """Why a row of the CSV is not of the release's format (a sentence, two image ids, flags True or False), or None."""
    for key in ("sentence", "pos_image_id", "neg_image_id"):
        why = text_problem(row, key)
        if why:
            return why
    odd = [SPLITS[s] for s, flag in flags.items() if flag not in ("true", "false")]
    return f"{odd[0]} is {row[odd[0]]!r}, neither True nor False" if odd else None
