"""VL-CheckList (Zhao et al., 2022): a positive against a negative caption, by Object, Attribute and Relation.

Layout: the repository's (github.com/om-ai-lab/VL-CheckList) `data/` tree in `vl_checklist/data/` as it is
(`Attribute/`, `Object/`, `Relation/`), each source's images in `vl_checklist/images/<root>/` as its corpus
yaml's IMG_ROOT names it (`vg/` holding VG_100K and VG_100K_2, also VAW's images; `swig/`; `hake/`), as the
repository's DATASETS.md lays out `$DATASET/`.

Rule: the ITC task of `vl_checklist/evaluate.py` (`Evaluate.eval`): each record's first POS caption against
its first NEG caption, correct when s(I, POS[0]) > s(I, NEG[0]) (a tie wrong); a file's accuracy over its
records whose image is there (`data_loader.py` skips the others; here they are also counted and named). Then
`radar.py` (`generate_chart`) over `corpus.json`'s 13 sub-dimensions: a sub-dimension is the mean over its
sources of each source's mean over its files. Object, Attribute and Relation average their sub-dimensions
(the paper's three headline numbers), `overall` those three. A file that is absent, empty or unreadable, and
each malformed record, is named in the result; means run over what is there.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ...errors import CompclipError, UsageError
from ...options import option
from .. import protocols
from ..base import Benchmark, Missing, Result, acc_of, accuracy, mean, mean_present, read_json, register
from ..items import choice_rows

OBJECT_ROLES = {"vg": ("obj", "subj"), "swig": ("agent", "destination", "item", "tool")}


def _object(kind: str, place: str) -> dict[str, list[tuple[str, str]]]:
    """corpus.json's entries of an Object sub-dimension (Size: large/medium/small, Location: center/mid/margin)."""
    low = kind.lower()
    return {
        "vg": [(f"Object/{kind}/vg_{low}/vg_{role}_{place}.json", "vg") for role in OBJECT_ROLES["vg"]],
        "swig": [(f"Object/{kind}/swig_{low}/swig_{role}/swig_{role}_{place}.json", "swig") for role in OBJECT_ROLES["swig"]],
        "hake": [(f"Object/{kind}/hake_{low}/hake_obj_{place}.json", "hake")],
    }


# corpus.json: sub-dimension -> source -> [(annotation file under data/, image root under images/)], each file and
# root as the corpus/v1/<type>/<name>.yaml it names gives them (ANNO_PATH, IMG_ROOT); VAW's images are VG's.
CORPUS: dict[str, dict[str, list[tuple[str, str]]]] = {
    **{place: _object("Size", place) for place in ("large", "medium", "small")},
    **{place: _object("Location", place) for place in ("center", "mid", "margin")},
    **{f"{attr}_a" if attr == "action" else attr: {source: [(f"Attribute/{source}/{attr}.json", "vg")] for source in ("vg", "vaw")}
       for attr in ("color", "material", "action", "size", "state")},
    "action_r": {"vg": [("Relation/vg/action.json", "vg")], "swig": [("Relation/swig_action.json", "swig")],
                 "hake": [("Relation/hake_action.json", "hake")]},
    "spatial": {"vg": [("Relation/vg/spatial.json", "vg")]},
}
CATEGORIES = {"Object": ("large", "medium", "small", "center", "mid", "margin"),
              "Attribute": ("color", "material", "action_a", "size", "state"), "Relation": ("action_r", "spatial")}
PAIRS = ("first", "zip")


@dataclasses.dataclass(frozen=True)
class Options:
    pairs: str = option("first", "first: POS[0] against NEG[0], as the official ITC; zip: every k-th POS against the k-th NEG")
    max_per_file: int | None = option(None, "score at most this many records of each file, the first ones whose image is there "
                                            "(the repository's configs/sample.yaml: MAX_NUM 2000, ITC takes half); none: all")

    def __post_init__(self):
        if self.pairs not in PAIRS:
            raise UsageError(f"--bench-opt vl_checklist.pairs must be one of {', '.join(PAIRS)}, not {self.pairs!r}")
        if self.max_per_file is not None and self.max_per_file < 1:
            raise UsageError(f"--bench-opt vl_checklist.max_per_file must be at least 1, not {self.max_per_file}")


@register
class VLCheckList(Benchmark):
    name = "vl_checklist"
    task = "image_caption_selection"
    splits = tuple(CATEGORIES)
    spectrum = "vl_checklist"  # the mean of Object, Attribute and Relation, each the mean of its dimensions
    Options = Options
    layout = ("VL-CheckList: the data/ folder of github.com/om-ai-lab/VL-CheckList in DATA_ROOT/vl_checklist/data/, each source's "
              "images in DATA_ROOT/vl_checklist/images/{vg,swig,hake}/ as the repository's DATASETS.md lays out $DATASET/")
    misplaced = (("vl_checklist/Attribute", "Attribute/, Object/ and Relation/ go in vl_checklist/data/ (the repository's data/ as it is)"),
                 ("vl_checklist/images/VG_100K", "each source's images go in images/<its IMG_ROOT>/: VG's (and VAW's) in images/vg/"))

    def spectrum_parts(self, metrics):
        complete = all(acc_of(metrics, d) is not None for dims in CATEGORIES.values() for d in dims)
        return [acc_of(metrics, c) if complete else None for c in self.splits]

    def images(self, root):
        base, found = root / "vl_checklist", {}
        for sources in self.dimensions().values():
            for _, entries in sources:
                for file, image_root in entries:
                    if (base / "data" / file).is_file():
                        records, _ = self.examples(base / "data" / file, base / "images" / image_root, Options())
                        found.update(dict.fromkeys(r[0][0] for r in records))
        return list(found)

    def kind_of(self, split):
        """An item's split is its annotation file, under its category's folder: `Attribute/color/vaw`."""
        top = split.partition("/")[0]
        return top.lower() if top in CATEGORIES else None

    def dimensions(self, splits=()) -> dict[str, list[tuple[str, list[tuple[str, str]]]]]:
        """The sub-dimensions of the chosen categories, each with its sources' (annotation file, image root) entries."""
        return {dim: list(CORPUS[dim].items()) for cat in splits or self.splits for dim in CATEGORIES[cat]}

    def lacks(self, root, splits):
        base = root / "vl_checklist" / "data"
        wanted = [base / f for sources in self.dimensions(splits).values() for _, entries in sources for f, _ in entries]
        if any(f.is_file() for f in wanted):
            return None
        return self.not_found(root, f"looked for {len(wanted)} annotation files under {base}: none is there")

    def run(self, scorer, root, ties, splits=(), options=None):
        options = options or Options()
        base, missing, absent, files, metrics, items = root / "vl_checklist", Missing.of(scorer), {}, {}, {}, []
        for dim, sources in self.dimensions(splits).items():
            by_source = {}
            for source, entries in sources:
                scored = []
                for file, image_root in entries:
                    path = base / "data" / file
                    records, problem = self.examples(path, base / "images" / image_root, options)
                    if problem:
                        absent[str(path)] = problem
                    # the first records whose image is there, as data_loader.py and evaluate.py cut them
                    examples = [e for r in [r for r in records if missing.keep([r[0][0]])][: options.max_per_file] for e in r]
                    if examples:
                        images = [i for i, _, _ in examples]
                        pos, neg = (scorer.pairs(images, [e[k] for e in examples]) for k in (1, 2))
                        correct = protocols.pair_accuracy(pos, neg, ties)
                        files[file.removesuffix(".json")] = accuracy(correct)
                        ids = [str(Path(i).relative_to(base / "images")) for i in images]  # a record is named by its image
                        items += choice_rows(file.removesuffix(".json"), ids, images, [e[1:] for e in examples],
                                             torch.stack([pos, neg], 1), correct)
                        scored.append(files[file.removesuffix(".json")]["acc"])
                if scored:
                    by_source[source] = mean(scored)
            metrics[dim] = {"acc": mean(by_source.values()), **by_source}
        for cat in splits or self.splits:
            metrics[cat] = mean_present(metrics[d]["acc"] for d in CATEGORIES[cat])
        metrics["overall"] = mean_present(metrics[c] for c in splits or self.splits)
        metrics["files"] = files
        return Result(metrics, missing, absent, items)

    @staticmethod
    def examples(path: Path, images: Path, options: Options) -> tuple[list[list[tuple[Path, str, str]]], str | None]:
        """Each record of a file as its (image, POS, NEG) triples to score, and what is wrong with the file (absent,
        unreadable, empty, malformed records)."""
        if not path.is_file():
            return [], "absent: not scored"
        try:
            records = read_json(path)
        except CompclipError as e:
            return [], f"unreadable: {e}"
        if not records:
            return [], "empty: nothing to score"
        kept, bad = [], []
        for k, record in enumerate(records):
            try:
                image, captions = record
                pairs = list(zip(captions["POS"], captions["NEG"], strict=False))
                if not pairs or not isinstance(image, str):
                    raise ValueError
            except (ValueError, TypeError, KeyError):
                bad.append(k)
                continue
            kept.append([(images / image, p, n) for p, n in (pairs[:1] if options.pairs == "first" else pairs)])
        problem = f"{len(bad)} malformed records skipped (not [image, {{POS: [...], NEG: [...]}}]), first: record {bad[0]}" if bad else None
        return kept, problem
