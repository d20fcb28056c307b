"""CLIP_benchmark's `--dataset` names and the zero-shot suites, each declared with the source it was read from, so that
`compclip eval --dataset NAME` scores what `clip_benchmark eval --dataset NAME` scores: a classification set by the
zero-shot benchmark with that set selected (`zeroshot/NAME`), a retrieval set by the retrieval benchmark
(`retrieval/NAME`), and a suite (DataComp's 38, CLIC's ZS-10, ELEVATER's 20, CLIP_benchmark's own collections) or a
text file of names (CLIP_benchmark's `--dataset benchmark/webdatasets.txt`) by the zero-shot benchmark over every
member, in one run, so that each image is decoded once per preprocessing. Nothing heavy is imported here: the command
line checks a name before torch loads.

A member is named in CLIP_benchmark's spelling and read from DATA_ROOT/zeroshot/ under the first of the folder names
`folder_names` gives: the name itself, and the webdataset copies' names (the Hub's `wds_<name>`, DataComp's
`download_evalsets.py` folder `wds_<name>_test`, a `/` read as `-`).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ..errors import MissingFileError, UsageError
from ..text import did_you_mean

# the classification sets CLIP_benchmark 1.6.2's build_dataset opens from local files and compclip reads in the same
# layouts (eval/zeroshot_sources.py); `vtab/<name>` is read from its webdataset copy (the Hub's wds_vtab-<name>)
LAYOUT_NAMES = ("cifar10", "cifar100", "imagenet1k", "imagenet-a", "imagenet-r", "imagenet-o", "imagenet_sketch", "imagenetv2",
                "objectnet", "voc2007", "voc2007_multilabel", "caltech101", "stl10", "mnist", "food101", "sun397", "cars",
                "fgvc_aircraft", "dtd", "pets", "flowers", "gtsrb", "eurosat", "country211", "pcam", "renderedsst2", "fer2013")
VTAB_NAMES = ("caltech101", "cifar10", "cifar100", "clevr_count_all", "clevr_closest_object_distance", "diabetic_retinopathy", "dmlab",
              "dsprites_label_orientation", "dsprites_label_x_position", "dtd", "eurosat", "kitti_closest_vehicle_distance",
              "flowers", "pets", "pcam", "resisc45", "smallnorb_label_azimuth", "smallnorb_label_elevation", "svhn")
RETRIEVAL_NAMES = ("mscoco_captions", "flickr30k", "flickr8k")  # get_dataset_default_task: zeroshot_retrieval
OTHER_FOLDERS = {"imagenet1k": ("imagenet",)}  # compclip's class-folder name of a set, besides CLIP_benchmark's
# CLIP_benchmark names compclip does not read, each with why (builder.py's other branches)
UNREAD = {
    "tfds/": "CLIP_benchmark opens tfds/ sets through tensorflow_datasets, which compclip does not read; their webdataset "
             "copies are read as wds/<name>",
    "imagenet-w": "CLIP_benchmark builds ImageNet-W by watermarking ImageNet on the fly; compclip reads no such layout",
    "babel_imagenet": "a multilingual set; compclip scores English class names only",
    "imagenet1k-unverified": "CLIP_benchmark's download of ImageNet without its checksum; compclip reads imagenet1k's devkit layout",
    "multilingual_mscoco_captions": "a multilingual set; compclip scores English captions only",
    "crossmodal3600": "a multilingual set; compclip scores English captions only",
    "xtd10": "a multilingual set; compclip scores English captions only",
    "xtd200": "a multilingual set; compclip scores English captions only",
    "flickr30k-200": "a multilingual set; compclip scores English captions only",
}
# CLIP_benchmark's other tasks, which compclip scores as its own benchmarks
ELSEWHERE = {"sugar_crepe": "sugarcrepe"}
DATASET_LISTING = ("; --dataset also takes CLIP_benchmark's dataset names (cifar10, wds/vtab/cifar10, flickr30k), the suites "
                   "datacomp, clic_zs10, elevater, vtab, vtab+ and imagenet_robustness, and a text file of names (docs/data.md)")


@dataclasses.dataclass(frozen=True)
class Member:
    """One dataset of a suite: its name in CLIP_benchmark's spelling (or the suite's own, where it has no CLIP_benchmark
    counterpart), the figure the suite's mean takes of it, its task (classification; retrieval, scored in the same run
    from the CLIP_benchmark wds set `reads` names; or unscored), and, for one compclip does not score, why."""

    name: str
    main_metric: str = "acc1"
    task: str = "classification"
    why: str = ""
    reads: str = ""


@dataclasses.dataclass(frozen=True)
class Suite:
    """A suite: its members, where they were read from (repository, file, commit), and how its mean is taken."""

    name: str
    title: str
    source: str
    mean_rule: str
    members: tuple[Member, ...]
    departs: str = ""  # how compclip's run of it differs from the suite's own, said in each run's result
    subset: int = 0  # the images of each set its authors score (a seeded draw, as zeroshot.subset draws), 0: every image


def _classification(*names: str, recall: tuple[str, ...] = ()) -> tuple[Member, ...]:
    return tuple(Member(n, "mean_per_class_recall" if n in recall else "acc1") for n in names)


DATACOMP = Suite(
    "datacomp", "DataComp's 38 evaluation tasks",
    "mlfoundations/datacomp tasklist.yml (commit 2d7bde7c), each task's `main_metric` (acc1 where none is named); "
    "eval_utils/wds_eval.py reads each classification task as CLIP_benchmark's wds/<task> (commit 274dbeea)",
    "the unweighted mean of each task's main_metric, as evaluate.py's `Average` (commit 3b83f9f3)",
    (*_classification("vtab/caltech101", "cifar10", "vtab/cifar100", "vtab/clevr_count_all", "vtab/clevr_closest_object_distance",
                      "country211", "vtab/dtd", "vtab/eurosat", "fgvc_aircraft", "food101", "gtsrb", "imagenet1k", "imagenet_sketch",
                      "imagenetv2", "imagenet-a", "imagenet-o", "imagenet-r", "vtab/kitti_closest_vehicle_distance", "mnist",
                      "objectnet", "vtab/flowers", "vtab/pets", "voc2007", "vtab/pcam", "renderedsst2", "vtab/resisc45", "cars",
                      "stl10", "sun397", "vtab/svhn",
                      recall=("vtab/caltech101", "fgvc_aircraft", "vtab/flowers", "vtab/pets")),
     # DataComp's eval_utils/retr_eval.py (commit 170b603b) scores these Karpathy test splits (the Hub's nlphuji copies) by
     # CLIP_benchmark's zeroshot_retrieval, its mean_recall@1 the mean of the text and image recall@1
     Member("retrieval/flickr30k", "mean_recall@1", "retrieval", reads="flickr30k"),
     Member("retrieval/mscoco_2014_5k_test_image_text_retrieval", "mean_recall@1", "retrieval", reads="mscoco_captions"),
     Member("misc/winogavil", "jaccard_score_10-12", "unscored",
            "an association task scored by DataComp's eval_utils/wino_eval.py (Jaccard index over its candidates), no "
            "CLIP_benchmark layout"),
     *(Member(f"wilds/{n}", metric, "unscored", "a WILDS set scored by DataComp's eval_utils/wilds_eval.py from its "
              f"metadata ({metric}), which CLIP_benchmark's layouts do not hold")
       for n, metric in (("iwildcam", "F1-macro_all"), ("camelyon17", "acc1"), ("fmow", "acc_worst_region"))),
     *(Member(f"fairness/{n}", metric, "unscored", "a fairness set scored by DataComp's eval_utils/fairness_eval.py over "
              f"its groups ({metric}), which CLIP_benchmark's layouts do not hold")
       for n, metric in (("dollar_street", "acc_top5_wg"), ("geode", "acc_wg")))),
)

CLIC_ZS10 = Suite(
    "clic_zs10", "CLIC's ZS-10",
    "AmitPeleg/CLIC eval/eval_zeroshot_imagenet.py, `zero_shot_all_classifications`'s dataset_list (commit 5f9ff153)",
    "the unweighted mean of the ten acc1",
    _classification("food101", "cifar10", "cifar100", "cars", "fgvc_aircraft", "dtd", "pets", "caltech101", "flowers", "country211"),
    subset=1000,
)

ELEVATER_FORMAT = ("ELEVATER releases it in its own format (vision-datasets' DatasetHub: a zip of images and an index "
                   "text file of image and label per line), which no CLIP_benchmark layout reads")
ELEVATER = Suite(
    "elevater", "ELEVATER's 20 image-classification sets",
    "Computer-Vision-in-the-Wild/DataDownload README.md, its download_datasets.py names less the two PING sets (commit 1a86d059)",
    "the unweighted mean of the acc1 of the sets scored",
    (*_classification("caltech101", "cifar10", "cifar100", "country211", "dtd", "eurosat", "fer2013", "fgvc_aircraft", "food101",
                      "gtsrb", "vtab/kitti_closest_vehicle_distance", "mnist", "flowers", "pets", "pcam", "renderedsst2", "vtab/resisc45",
                      "cars"),
     Member("hateful-memes", task="unscored", why=f"{ELEVATER_FORMAT}, and CLIP_benchmark has no Hateful Memes set"),
     Member("voc-2007-classification", "mean_average_precision", "unscored",
            f"{ELEVATER_FORMAT}; its test split is multi-label (CLIP_benchmark's voc2007_multilabel is the same test images, "
            "scored by --dataset voc2007_multilabel)")),
    departs=f"{ELEVATER_FORMAT}: each set is read in its CLIP_benchmark layout instead, with CLIP_benchmark's test split, "
            "class names and templates, not ELEVATER's",
)


def _collection(name: str, names: tuple[str, ...]) -> Suite:
    return Suite(name, f"CLIP_benchmark's {name} collection", f"mehdidc/clip_benchmark v1.6.2 clip_benchmark/datasets/builder.py, "
                 f"dataset_collection[{name!r}]", "the unweighted mean of the acc1", _classification(*names))


VTAB_PLUS = ("imagenet1k", "imagenetv2", "imagenet_sketch", "imagenet-a", "imagenet-r", "objectnet", "fer2013", "voc2007",
             "voc2007_multilabel", "sun397", "cars", "fgvc_aircraft", "mnist", "stl10", "gtsrb", "country211", "renderedsst2",
             *(f"vtab/{n}" for n in VTAB_NAMES))
SUITES = {s.name: s for s in (
    DATACOMP, CLIC_ZS10, ELEVATER,
    _collection("vtab", (*(f"vtab/{n}" for n in VTAB_NAMES if n not in ("cifar10", "svhn")), "sun397", "vtab/svhn")),
    _collection("vtab+", VTAB_PLUS),
    _collection("imagenet_robustness", ("imagenetv2", "imagenet_sketch", "imagenet-a", "imagenet-r", "objectnet")),
)}


def bare(name: str) -> str:
    """A classification set's name without CLIP_benchmark's `wds/` prefix: `wds/vtab/cifar10` and `vtab/cifar10` are one set."""
    return name.removeprefix("wds/")


def folder_names(name: str) -> list[str]:
    """The folder names under DATA_ROOT/zeroshot/ (or retrieval/) a set of CLIP_benchmark's name is looked for under, in
    order: its own (`/` as `-`, as CLIP_benchmark's `{dataset_cleaned}`), compclip's, the Hub's download, DataComp's."""
    cleaned = bare(name).replace("/", "-")
    return list(dict.fromkeys([cleaned, *OTHER_FOLDERS.get(cleaned, ()), f"wds_{cleaned}", f"wds_{cleaned}_test"]))


def find_folder(parent: Path, name: str) -> Path | None:
    return next((parent / f for f in folder_names(name) if (parent / f).is_dir()), None)


def wds_retrieval_places(root: Path, name: str) -> list[Path]:
    """Where the wds copy of CLIP_benchmark's retrieval set `name` is looked for, in order: under DATA_ROOT/retrieval/
    (as `--dataset NAME` reads it), then DATA_ROOT/zeroshot/ (where DataComp's download puts its whole suite)."""
    return [root / parent / f for parent in ("retrieval", "zeroshot") for f in folder_names(name)]


def find_wds_retrieval(root: Path, name: str) -> Path | None:
    """The first of `wds_retrieval_places` holding a wds set's shard count (test/nshards.txt)."""
    return next((place for place in wds_retrieval_places(root, name) if (place / "test" / "nshards.txt").is_file()), None)


def unread_reason(name: str) -> str | None:
    """Why compclip does not read CLIP_benchmark's set `name` (or its webdataset copy, `wds/<name>`), or None where it
    does or the name is not CLIP_benchmark's."""
    name = bare(name)
    return next((why for prefix, why in UNREAD.items() if name == prefix or (prefix.endswith("/") and name.startswith(prefix))), None)


def classification_name(name: str) -> bool:
    """True for a classification set's CLIP_benchmark name compclip reads (a layout's, `vtab/<name>`, any `wds/<name>`)."""
    if name.startswith("wds/") and len(name) > len("wds/"):
        return not retrieval_name(name) and unread_reason(name) is None
    return name in LAYOUT_NAMES or (name.startswith("vtab/") and name.removeprefix("vtab/") in VTAB_NAMES)


def retrieval_name(name: str) -> bool:
    """True for a retrieval set's CLIP_benchmark name, as a layout's or its webdataset copy's (`flickr30k`, `wds/flickr30k`)."""
    return bare(name) in RETRIEVAL_NAMES


def _listed_member(name: str) -> Member:
    """A name of a list file as a member of its suite: a retrieval set (CLIP_benchmark's webdatasets.txt lists
    wds/flickr30k beside the classification sets) named with the command that scores it, not looked for as a
    classification set."""
    if retrieval_name(name):
        return Member(name, "mean_recall@1", "retrieval", f"a retrieval set: scored by compclip's retrieval benchmark (--dataset {name})")
    return Member(name)


def known_names() -> list[str]:
    """Every name `--dataset` takes besides the benchmarks': the suites, the layouts' sets, vtab/ and retrieval sets."""
    return sorted({*SUITES, *LAYOUT_NAMES, *(f"vtab/{n}" for n in VTAB_NAMES), *RETRIEVAL_NAMES, *ELSEWHERE})


def names_in_file(file: Path) -> list[str]:
    """A text file of CLIP_benchmark names, one a line, as `get_dataset_collection_from_file` reads it (blank lines and
    `#` comments skipped); each name checked, the first wrong one refused naming its line."""
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise MissingFileError(f"{file}: cannot read the list of datasets ({type(e).__name__}: {e})") from None
    names = []
    for number, line in enumerate(lines, 1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        if not classification_name(name) and not retrieval_name(name):
            why = unread_reason(name) or f"not a classification set's CLIP_benchmark name{did_you_mean(name, known_names())}"
            raise UsageError(f"{file} line {number}: {name!r}: {why}")
        names.append(name)
    if not names:
        raise UsageError(f"{file}: names no dataset (one CLIP_benchmark name a line)")
    return list(dict.fromkeys(names))


def is_list_file(given: str) -> bool:
    """Whether `given` is a text file of names (CLIP_benchmark's `--dataset benchmark/webdatasets.txt`), each checked
    now, before a model loads: a wrong line is one error naming it."""
    return Path(given).is_file() and bool(names_in_file(Path(given)))


@dataclasses.dataclass(frozen=True)
class Selection:
    """What a `zeroshot/<split>` run scores: one set, a suite, or a file's list (a suite of its own)."""

    suite: Suite | None
    members: tuple[Member, ...]


def selection(split: str) -> Selection:
    """The sets `zeroshot/<split>` scores: a suite's, a text file's (its path), or the one set named."""
    if split in SUITES:
        return Selection(SUITES[split], SUITES[split].members)
    if Path(split).is_file():
        members = tuple(_listed_member(name) for name in names_in_file(Path(split)))
        return Selection(Suite(split, f"the datasets listed in {split}", split, "the unweighted mean of the acc1", members), members)
    return Selection(None, (Member(split),))


def departures(split: str, subset: int) -> list[str]:
    """How a run of `zeroshot/<split>` drawing `subset` images a set (0: every image) scores otherwise than the suite's
    authors, one sentence each."""
    suite = selection(split).suite
    if suite is None:
        return []
    drawn = [] if suite.subset in (0, subset) else [
        f"{suite.title} scores {suite.subset:,} images of each set, drawn with seed 1, and this run "
        f"{f'{subset:,}' if subset else 'every image'}: --bench-opt zeroshot.subset={suite.subset} draws them so"]
    return drawn + ([f"{suite.title}: {suite.departs}"] if suite.departs else [])


def selects(benchmark: str, split: str) -> bool:
    """Whether `<benchmark>/<split>` selects CLIP_benchmark's sets: `zeroshot/` a suite, a text file of names or a
    classification set; `retrieval/` a retrieval set."""
    if benchmark == "zeroshot":
        return split in SUITES or classification_name(split) or is_list_file(split)
    return benchmark == "retrieval" and split in RETRIEVAL_NAMES


def benchmark_item(item: str) -> str | None:
    """CLIP_benchmark's `--dataset` name (or suite, or text file of names) as compclip's `--benchmark` item
    (`zeroshot/cifar10`, `retrieval/flickr30k`, `sugarcrepe/swap_att`); None where `item` is none of them. A set compclip
    does not read is refused in one line saying why."""
    if item in SUITES or classification_name(item) or is_list_file(item):
        return f"zeroshot/{item}"
    if retrieval_name(item):
        return f"retrieval/{bare(item)}"
    head, _, split = item.partition("/")
    if head in ELSEWHERE:
        return f"{ELSEWHERE[head]}/{split}" if split else ELSEWHERE[head]
    why = unread_reason(item)
    if why is not None:
        raise UsageError(f"--dataset {item}: {why}")
    return None
