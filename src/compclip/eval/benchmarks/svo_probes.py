"""SVO-Probes (Hendricks & Nematzadeh, 2021): one sentence, a true and a false image that differs in its subject, verb
or object.

Layout: the google-deepmind/svo_probes repository's `svo_probes.csv` in `svo_probes/` (columns `sentence`,
`pos_image_id`, `neg_image_id`, `subj_neg`, `verb_neg`, `obj_neg`, with `pos_url`, `neg_url` and the triplets), and the
images, which the release gives only as URLs (`image_urls.txt`; many no longer answer), downloaded by the user into
`svo_probes/images/` named by their id: `<pos_image_id>.jpg` (or `.png`, `.jpeg`, `.webp`).

Rule (`svo_probes.rule`): the release's notebook (`probing_image_text_models.ipynb`, google-deepmind/svo_probes at
commit 206219e2afd9640b8bbe6ef95f49b52b0d4ed350) sorts the rows by the kind of their negative, each subset holding the
rows where that flag alone is set (`subj_neg & ~obj_neg & ~verb_neg`, ...), and reports each subset and `All`, the rows
of the three together. `official`, the default, is its `accuracy`: the model decides each (sentence, image) pair a match
(1) or not (0); the (sentence, positive image) pairs and the (sentence, negative image) pairs are each taken once
(`drop_duplicates`), Pos is the share of positive pairs decided 1, Neg the share of negative pairs decided 0, and the
figure (`acc`) is their mean, Avg = (Pos + Neg) / 2, within each subset and over `All` (`overall`, with `overall_pos`
and `overall_neg`). The notebook reads the decisions of models with a match classifier; a dual encoder's similarity has
no threshold of its own, so the official rule takes one, `svo_probes.threshold` (a pair matches when s(image,
sentence) > T); without one a run scores `pairwise`, says so and records it among its departures.
`pairwise`, compclip's departure (as vl_compo's sweep reads the image side
of the probe), scores each row as the sentence choosing between its two images: correct when s(true image, sentence) >
s(false image, sentence) (a tie wrong under strict ties), repeated rows counted each time, `overall` over every row of
the three (a micro average). The sweep's column (`spectrum`) is filled only by `pairwise`, the rule it was computed by.
Rows whose images are not there are counted missing per subset; a subset with no image found is named, not scored 0.
The CSV is read as the notebook's pandas reads it (UTF-8, a field of any length); a row not of its format (cut short,
bytes that are not UTF-8, an empty sentence or image id, a flag neither True nor False) is skipped and named by its
line, under its subset where its flags tell it.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch

from ...errors import UsageError
from ...options import option
from .. import protocols
from ..base import Benchmark, Malformed, Missing, Result, acc_of, accuracy, read_csv, register, text_problem
from ..items import image_choice_rows

SPLITS = {"subj": "subj_neg", "verb": "verb_neg", "obj": "obj_neg"}  # each subset: the rows whose negative is of that kind alone
EXTENSIONS = (".jpg", ".png", ".jpeg", ".webp")
COLUMNS = ("sentence", "pos_image_id", "neg_image_id", *SPLITS.values())
RULES = ("official", "pairwise")


@dataclasses.dataclass(frozen=True)
class Options:
    rule: str = option("official", "official: the notebook's match decisions, each (sentence, image) pair once, Avg = (Pos + Neg)/2; "
                       "pairwise: each row's sentence choosing between its two images (compclip's, vl_compo's reading)")
    threshold: float | None = option(None, "the official rule's match decision: a pair matches when s(image, sentence) is above "
                                     "it (a dual encoder has no threshold of its own: without one, the run scores pairwise, a "
                                     "recorded departure)")

    def __post_init__(self):
        if self.rule not in RULES:
            raise UsageError(f"--bench-opt svo_probes.rule must be one of {', '.join(RULES)}, not {self.rule!r}")
        if self.threshold is not None and not math.isfinite(self.threshold):
            raise UsageError(f"--bench-opt svo_probes.threshold={self.threshold}: a match threshold is a finite number")


def rule_of(options: Options) -> str:
    """The rule a run scores by: the official one needs a match threshold, which a similarity alone does not give; without
    one the run scores `pairwise` (said, and recorded among its departures) rather than by a threshold nobody chose."""
    return "pairwise" if options.rule == "official" and options.threshold is None else options.rule


@register
class SVOProbes(Benchmark):
    name = "svo_probes"
    task = "image_caption_selection"  # CLIP_benchmark's name for a choice among pairs
    splits = tuple(SPLITS)
    Options = Options
    spectrum = "svo_probes"  # the mean of the subject, verb and object negatives, each scored pairwise
    layout = ("SVO-Probes: svo_probes.csv of github.com/google-deepmind/svo_probes in DATA_ROOT/svo_probes/, its images "
              "(URLs in image_urls.txt, many of which no longer answer, and no archive is published: rows whose images are not "
              "there are counted missing) downloaded into DATA_ROOT/svo_probes/images/<image id>.jpg")

    def spectrum_parts(self, metrics):
        official = any(isinstance(metrics.get(s), dict) and "pos_acc" in metrics[s] for s in self.splits)
        return [None if official else acc_of(metrics, s) for s in self.splits]  # the sweep's column is pairwise's: no other rule fills it

    def departures(self, options, ties, pretrained, splits):
        if rule_of(options) == "official":
            return []
        why = "svo_probes.rule=pairwise" if options.rule == "pairwise" else \
            "svo_probes.rule=official without a match threshold (--bench-opt svo_probes.threshold=T), so scored pairwise"
        return [f"{why}: each row's sentence chooses between its two images, repeated rows counted each time, where the notebook "
                "takes each pair's match decision once and reports Avg = (Pos + Neg) / 2"]

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
        options = options or Options()
        rule = rule_of(options)
        missing, metrics, items, absent, malformed = Missing.of(scorer), {}, [], {}, Malformed()
        rows = self.rows(root, malformed)
        together, kept_together, scores_together = [], [], []
        for split in splits or self.splits:
            scorer.at(split)
            pairs = [(self.image(root, r["pos_image_id"]), self.image(root, r["neg_image_id"])) for r in rows[split]]
            kept = [(r, pair) for r, pair in zip(rows[split], pairs, strict=True) if missing.keep(list(pair))]
            sentences = [r["sentence"] for r, _ in kept]
            scores = torch.stack([scorer.pairs([pair[k] for _, pair in kept], sentences) for k in (0, 1)], dim=1) if kept \
                else torch.zeros(0, 2)
            if rule == "pairwise":
                correct = protocols.pair_accuracy(scores[:, 0], scores[:, 1], ties)
                metrics[split] = {**accuracy(correct), "n_missing": len(rows[split]) - len(kept)}
            else:
                correct, figures = notebook_accuracy([r for r, _ in kept], scores, options.threshold)
                metrics[split] = {**figures, "n": len(kept), "n_missing": len(rows[split]) - len(kept)}
            if not kept:
                absent[f"{self.file(root)} [{split}]"] = f"no image of the {split} subset found: not scored"
            together.append(correct)
            kept_together += [r for r, _ in kept]
            scores_together.append(scores)
            items += image_choice_rows(split, [r["id"] for r, _ in kept], [pair for _, pair in kept], sentences, scores.tolist(),
                                       [0] * len(kept), correct)
        if kept_together:
            metrics.update(self.overall(kept_together, torch.cat(scores_together), torch.cat(together), rule, options.threshold))
        absent.update(malformed.named(splits))
        return Result(metrics, missing, absent, items)

    @staticmethod
    def overall(kept: list[dict], scores: torch.Tensor, correct: torch.Tensor, rule: str, threshold: float | None) -> dict[str, float]:
        """The notebook's `All`, over the rows of every subset run: pairwise, every row once (a micro average); official,
        its `accuracy` over them all, a pair that two subsets share taken once."""
        if rule == "pairwise":
            return {"overall": accuracy(correct)["acc"]}
        figures = notebook_accuracy(kept, scores, threshold)[1]
        return {"overall": figures["acc"], "overall_pos": figures["pos_acc"], "overall_neg": figures["neg_acc"]}


def notebook_accuracy(rows: list[dict], scores: torch.Tensor, threshold: float) -> tuple[torch.Tensor, dict[str, float | int]]:
    """The notebook's `accuracy` of rows scored (s(true image, sentence), s(false image, sentence)): each row right when
    its true image is decided a match and its false one not (the items' verdict), and the figures, each pair once."""
    matched = protocols.match_decisions(scores, threshold)
    figures = protocols.svo_probes_accuracy([(r["sentence"], r["pos_image_id"].strip()) for r in rows], matched[:, 0],
                                            [(r["sentence"], r["neg_image_id"].strip()) for r in rows], matched[:, 1])
    return matched[:, 0] & ~matched[:, 1], figures


def row_problem(row: dict[str, str], flags: dict[str, str]) -> str | None:
    """Why a row of the CSV is not of the release's format (a sentence, two image ids, flags True or False), or None."""
    for key in ("sentence", "pos_image_id", "neg_image_id"):
        why = text_problem(row, key)
        if why:
            return why
    odd = [SPLITS[s] for s, flag in flags.items() if flag not in ("true", "false")]
    return f"{odd[0]} is {row[odd[0]]!r}, neither True nor False" if odd else None
