"""CREPE (Ma et al., CVPR 2023): an image region, its caption and hard negatives; systematicity and productivity.

Layout: the RAIVNLab/CREPE repository's `data/syst_hard_negatives.zip` and `data/prod_hard_negatives.zip` unzipped into
`crepe/` (`crepe/syst_hard_negatives/syst_vg_hard_negs_{seen,unseen}_compounds_in_{cc12m,yfcc,laion}.csv`,
`crepe/prod_hard_negatives/{atom,negate,swap}/prod_vg_hard_negs_{TYPE}_complexity_{4..12}.csv`), and Visual Genome's
images where its download unpacks them, `visual_genome/VG_100K/` and `visual_genome/VG_100K_2/` (`<image_id>.jpg`, the
folders `crepe_eval_utils.py`'s `get_image_by_id` searches).

Rule (RAIVNLab/CREPE at commit 1fa81c425f442396fe304f170c8eb6dc0747c814): `crepe_compo_eval_open_clip.py`
(`gather_params`, `evaluate`) with `crepe_eval_utils.py` (`get_one2many_rank`, `get_one2many_metrics`): each row's
image cropped to its region (`TF.crop(image, y, x, height, width)`), its caption first among the row's hard negatives
(`valid_hard_negs_{atom,comp,combined}` for systematicity, `hard_negs` for productivity, Python lists in the CSV),
ranked by score; Recall@1, 3, 5 and 10 of the caption (`acc` is Recall@1, the paper's figure). The official rank comes
from `torch.argsort`, whose order among equal scores is not defined: compclip ranks a tie below the caption's rivals
(strict) or above them (`--ties clip_benchmark`). Systematicity's files are one per pretraining set, its seen and
unseen compounds those of that set's captions (`crepe.pretraining`, default cc12m as `crepe_params.py`'s
`--train-dataset`). The README restricts them to models pretrained on CC12M, YFCC15M or LAION-400M: a model's
pretraining is read from its open_clip pretrained tag (`cc12m`, `yfcc15m`, `laion400m_*`), and a run of systematicity
on a model of another tag (`openai`, `laion2b_*`, none: a checkpoint folder or a model in memory), or of another set
than `crepe.pretraining`, warns of it and records it as a departure. Each productivity type also averages its
complexities present (`prod_TYPE`). A file not there, or not readable as the release's CSV, is named, not scored. The
CSV is read as the release's pandas reads it (UTF-8, a field of any length) and the hard negatives as `BaseCsvDataset`
reads them (`ast.literal_eval`): a list of texts, or one quoted text, which is one option (the release's `list()` of it
would split it into its letters). A row not of that format (bytes that are not UTF-8, hard negatives that are no text
or an empty list, a region of no width or height) is skipped and named by its file and line.
"""
from __future__ import annotations

import ast
import dataclasses
import math
from pathlib import Path

import torch

from ...errors import DataError, UsageError
from ...options import option
from .. import protocols
from ..base import Benchmark, Malformed, Missing, Result, acc_of, mean_present, rate, read_csv, register, text_problem
from ..items import choice_rows

PRETRAINING = ("cc12m", "yfcc", "laion")
TAGS = {"cc12m": "cc12m", "yfcc15m": "yfcc", "laion400m": "laion"}  # open_clip's pretrained tags (their start) of each set
SYSTEMATICITY = {f"syst_{seen}_{kind}": (f"{seen}_compounds", f"valid_hard_negs_{kind}")
                 for seen in ("seen", "unseen") for kind in ("atom", "comp", "combined")}
PRODUCTIVITY = {f"prod_{kind}_{n}": (kind, n) for kind in ("atom", "negate", "swap") for n in range(4, 13)}
KINDS = {"atom": "object", "comp": "attribute", "swap": "relation", "negate": "negation"}  # the false captions' change
RECALLS = (1, 3, 5, 10)
REGION = ("x", "y", "width", "height")
VG_FOLDERS = ("VG_100K", "VG_100K_2")


@dataclasses.dataclass(frozen=True)
class Options:
    pretraining: str = option("cc12m", "the systematicity files' pretraining set: cc12m (the release's default), yfcc or laion "
                              "(the model's own)")

    def __post_init__(self):
        if self.pretraining not in PRETRAINING:
            raise UsageError(f"--bench-opt crepe.pretraining must be one of {', '.join(PRETRAINING)}, not {self.pretraining!r}")


@register
class CREPE(Benchmark):
    name = "crepe"
    task = "image_caption_selection"
    splits = (*SYSTEMATICITY, *PRODUCTIVITY)
    Options = Options
    spectrum = "crepe"  # vl_compo's `crepe::atom`, `crepe::swap`, `crepe::negate`: productivity's three kinds
    layout = ("CREPE: data/syst_hard_negatives.zip and data/prod_hard_negatives.zip of github.com/RAIVNLab/CREPE unzipped "
              "into DATA_ROOT/crepe/, Visual Genome's images in DATA_ROOT/visual_genome/VG_100K/ and VG_100K_2/")

    def spectrum_parts(self, metrics):
        return [acc_of(metrics, f"prod_{kind}") for kind in ("atom", "swap", "negate")]

    def kind_of(self, split):
        return KINDS.get(split.split("_")[2] if split.startswith("syst") else split.split("_")[1])

    def departures(self, options, ties, pretrained, splits):
        if not any(s in SYSTEMATICITY for s in (splits or self.splits)):
            return []
        own = pretraining_of(pretrained)
        if own is None:
            return [f"systematicity scored on a model whose pretraining ({pretrained or 'no pretrained tag'}) is none of CC12M, "
                    "YFCC15M, LAION-400M, to which CREPE's README restricts it: its seen and unseen compounds are those of "
                    f"{options.pretraining}'s captions, not of this model's"]
        if own != options.pretraining:
            return [f"systematicity scored on the {options.pretraining} files for a model pretrained on {own} ({pretrained}): "
                    f"--bench-opt crepe.pretraining={own} scores it on its own pretraining's compounds"]
        return []

    def file(self, root: Path, split: str, options: Options) -> Path:
        if split in SYSTEMATICITY:
            return root / self.name / "syst_hard_negatives" / f"syst_vg_hard_negs_{SYSTEMATICITY[split][0]}_in_{options.pretraining}.csv"
        kind, n = PRODUCTIVITY[split]
        return root / self.name / "prod_hard_negatives" / kind / f"prod_vg_hard_negs_{kind}_complexity_{n}.csv"

    def image(self, root: Path, image_id: str) -> Path:
        found = [root / "visual_genome" / folder / f"{image_id}.jpg" for folder in VG_FOLDERS]
        return next((f for f in found if f.is_file()), found[0])

    def present(self, root: Path, splits: tuple[str, ...], options: Options) -> tuple[list[str], dict[str, str]]:
        chosen = splits or self.splits
        absent = {str(self.file(root, s, options)): "absent: split not scored" for s in chosen if not self.file(root, s, options).is_file()}
        return [s for s in chosen if self.file(root, s, options).is_file()], absent

    def lacks(self, root, splits):
        present, _ = self.present(root, splits, Options())
        return None if present else self.missing_files(root, [self.file(root, s, Options()) for s in (splits or self.splits)[:1]])

    def rows(self, file: Path, negatives: str, split: str, malformed: Malformed) -> list[dict]:
        """The CSV's rows, each with its region and its options (the caption first), its row's index as `id`; a row not
        of the release's format is skipped and named in `malformed`."""
        rows = []
        for index, (line, row, why) in enumerate(read_csv(file, ("image_id", "caption", *REGION, negatives))):
            why = why or text_problem(row, "image_id") or text_problem(row, "caption")
            box, why = (None, why) if why else region(row)
            hard, why = (None, why) if why else hard_negatives(row, negatives)
            if why:
                malformed.skip(f"{file} [{split}]", f"at line {line}", why, split)
                continue
            rows.append({"id": index, "image_id": row["image_id"].strip(), "box": box, "options": [row["caption"], *hard]})
        return rows

    def images(self, root):
        options = Options()
        return list(dict.fromkeys(self.image(root, r["image_id"]) for s in self.present(root, (), options)[0]
                                  for r in self.rows(self.file(root, s, options), self.negatives(s), s, Malformed())))

    @staticmethod
    def negatives(split: str) -> str:
        return SYSTEMATICITY[split][1] if split in SYSTEMATICITY else "hard_negs"

    def run(self, scorer, root, ties, splits=(), options=None):
        options = options or Options()
        missing, metrics, items, malformed = Missing.of(scorer), {}, [], Malformed()
        present, absent = self.present(root, splits, options)
        read = {}
        for split in present:
            try:
                read[split] = self.rows(self.file(root, split, options), self.negatives(split), split, malformed)
            except DataError as e:  # this file alone: the others are scored
                absent[str(self.file(root, split, options))] = f"unusable, split not scored: {e}"
        for split, records in read.items():
            scorer.at(split)
            kept = [r for r in records if missing.keep([self.image(root, r["image_id"])])]
            flat = [(self.image(root, r["image_id"]), option, r["box"]) for r in kept for option in r["options"]]
            scores = scorer.pairs([f[0] for f in flat], [f[1] for f in flat], [f[2] for f in flat]) if flat else torch.zeros(0)
            each, start = [], 0
            for r in kept:
                each.append(scores[start: start + len(r["options"])])
                start += len(r["options"])
            ranks = torch.stack([protocols.query_ranks(s[None], torch.tensor([[True] + [False] * (len(s) - 1)]), ties)[0]
                                 for s in each]) if each else torch.zeros(0, dtype=torch.long)
            metrics[split] = {"acc": rate(ranks < 1), **{f"recall@{k}": rate(ranks < k) for k in RECALLS},
                              "n": len(kept), "n_missing": len(records) - len(kept)}
            items += choice_rows(split, [r["id"] for r in kept], [self.image(root, r["image_id"]) for r in kept],
                                 [r["options"] for r in kept], [s.tolist() for s in each], ranks < 1)
        for kind in ("atom", "negate", "swap"):
            members = [s for s in read if s.startswith(f"prod_{kind}_") and metrics[s]["n"]]
            if members:
                metrics[f"prod_{kind}"] = mean_present(metrics[s]["acc"] for s in members)
        absent.update(malformed.named())
        return Result(metrics, missing, absent, items)


def pretraining_of(pretrained: str) -> str | None:
    """The CREPE pretraining set of an open_clip pretrained tag (`laion400m_e32`: laion), None for one of another set."""
    return next((name for tag, name in TAGS.items() if pretrained == tag or pretrained.startswith(f"{tag}_")), None)


def region(row: dict[str, str]) -> tuple[tuple[float, float, float, float] | None, str | None]:
    """The row's region as (left, top, right, bottom), or None and why it is not one (`TF.crop` takes a width and a
    height above 0)."""
    try:
        x, y, width, height = (float(row[k]) for k in REGION)
    except ValueError:
        return None, f"the region {', '.join(f'{k} {row[k]!r}' for k in REGION)} is not four numbers"
    if not all(map(math.isfinite, (x, y, width, height))) or width <= 0 or height <= 0:
        return None, f"the region's width {row['width']} and height {row['height']} are not both above 0"
    return (x, y, x + width, y + height), None


def hard_negatives(row: dict[str, str], negatives: str) -> tuple[list[str] | None, str | None]:
    """The row's hard negatives as the release reads them (`ast.literal_eval`): a list of texts, or one quoted text as
    one option; or None and why not."""
    try:
        hard = ast.literal_eval(row[negatives])
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None, f"{negatives} {row[negatives][:80]!r} is not a Python list of texts"
    hard = [hard] if isinstance(hard, str) else hard
    if not isinstance(hard, (list, tuple)) or not all(isinstance(h, str) for h in hard):
        return None, f"{negatives} {row[negatives][:80]!r} is not a Python list of texts"
    if not hard:
        return None, f"{negatives} is empty: no hard negative to rank the caption among"
    return list(hard), None
