"""Zero-shot classification: prompt-ensembled class embeddings, top-1 accuracy (CLIP_benchmark's
`zero_shot_classifier`: each class the normalised mean of its prompts' normalised embeddings).

Every folder under `zeroshot/` is a dataset: one sub-folder of images per class (sorted names give the class
order, as torchvision's ImageFolder). Class names and prompts, first found wins:
- `--bench-opt zeroshot.classnames=FILE` / `zeroshot.templates=FILE`: CLIP_benchmark's files as they are
  (`en_classnames.json`, `en_zeroshot_classification_templates.json`, `cupl_prompts.json`): JSON keyed by dataset
  name, looked up by the folder's name (`imagenet` also as `imagenet1k`), templates falling back to `imagenet1k`'s
  as CLIP_benchmark's builder does; a dataset's templates may be a list (`{c}` or `{}` for the class name) or
  class-specific prompts (`{class name: [prompts]}`, CuPL);
- the folder's `classnames.txt` (one per line, in class order) and `templates.txt` (one per line);
- ImageNet's names for a folder called `imagenet` (else the folder names, `_` read as a space) and ImageNet's 80
  templates.
A folder in one of CLIP_benchmark's layouts (`zeroshot_sources`) has its images made RGB as CLIP_benchmark makes them
(`zeroshot.colours`); class folders in compclip's viewer's colours. A suite's retrieval members (DataComp's) are scored
in the same run by the retrieval benchmark, each from its wds set as `--dataset NAME` scores it alone.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import torch

from ...errors import DataError, MissingFileError, UsageError
from ...options import option
from .. import protocols, suites
from ..base import Benchmark, Missing, Result, accuracy, mean, rate, read_json, register
from ..items import class_rows
from ..zeroshot_sources import LayoutColours, Source, clip_benchmark_json, is_other_task, open_source
from . import retrieval

log = logging.getLogger("compclip.eval")

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp"}


@lru_cache(maxsize=1)
def imagenet() -> dict:
    return json.loads((Path(__file__).parent.parent / "assets" / "imagenet.json").read_text())


def class_prompts(chosen: list[str] | dict[str, list[str]], names: list[str], where: str) -> list[list[str]]:
    """Each class's prompts from the templates chosen: a list filled with each class name, or class-specific prompts
    (`{class name: [prompts]}`, CuPL), which must name every class."""
    if isinstance(chosen, dict):
        lacking = [n for n in names if n not in chosen]
        if lacking:
            raise DataError(f"{where}: no prompts for classes {lacking[:5]}")
        return [list(chosen[n]) for n in names]
    return [[fill(t, n, where) for t in chosen] for n in names]


def _lines(path: Path) -> list[str] | None:
    return [line.strip() for line in path.read_text(encoding="utf-8-sig").splitlines() if line.strip()] if path.is_file() else None


def fill(template: str, classname: str, where: str) -> str:
    """A prompt: the class name in the template's `{}` (open_clip, compclip) or `{c}` (CLIP_benchmark)."""
    try:
        return template.format(classname, c=classname)
    except (KeyError, IndexError, ValueError) as e:
        raise DataError(f"{where}: template {template!r} has a placeholder other than {{}} or {{c}} ({type(e).__name__}: {e})") from None


@dataclasses.dataclass(frozen=True)
class Options(LayoutColours):
    benchmark: ClassVar[str] = "zeroshot"

    classnames: str | None = option(None, "CLIP_benchmark-style JSON of class names per dataset (--custom_classname_file)")
    templates: str | None = option(None, "CLIP_benchmark-style JSON of templates or class-specific prompts per dataset "
                                         "(--custom_template_file)")
    subset: int = option(0, "images per dataset, drawn with subset_seed as CLIC's ZS-10 draws its 1,000 (0: every image)")
    subset_seed: int = option(1, "the seed of the subset draw (CLIC's eval/general_eval.py: --seed 1)")
    subset_skip: str = option("imagenet,imagenet1k", "comma-separated datasets scored whole under subset (CLIC scores "
                                                     "ImageNet's whole validation set; imagenet1k is CLIP_benchmark's name)")

    def __post_init__(self):
        super().__post_init__()
        if self.subset < 0:
            raise UsageError(f"--bench-opt zeroshot.subset must be 0 (every image) or more, not {self.subset}")
        for name in ("classnames", "templates"):
            value = getattr(self, name)
            if value is not None and not Path(value).is_file():
                raise MissingFileError(f"--bench-opt zeroshot.{name}={value}: no such file")


def clip_benchmark_metrics(scores: torch.Tensor, target: torch.Tensor, correct: torch.Tensor) -> dict[str, float]:
    """CLIP_benchmark's figures (metrics/zeroshot_classification.py, `evaluate`): acc1 (here under the run's tie rule),
    acc5 by `topk` (NaN under 5 classes, as there), and mean_per_class_recall, sklearn's `balanced_accuracy_score`: the
    mean over the classes that have images of the share of their images classified right."""
    if not len(target):
        return {"acc1": math.nan, "acc5": math.nan, "mean_per_class_recall": math.nan}
    top5 = math.nan
    if scores.shape[1] >= 5:
        top5 = rate((scores.topk(5, dim=1).indices == target[:, None]).any(1))
    recalls = [rate(correct[target == c]) for c in target.unique()]
    return {"acc1": rate(correct), "acc5": top5, "mean_per_class_recall": sum(recalls) / len(recalls)}


def mean_average_precision(scores: torch.Tensor, labels: list[tuple[int, ...]], classes: int) -> float:
    """CLIP_benchmark's multi-label figure (metrics/zeroshot_classification.py, `evaluate` when the targets are one row of
    classes an image: `average_precision_per_class`): per class, the images ranked by that class's score, the mean over
    the images holding the class of the precision at each one's rank (0 for a class no image holds); the mean over classes."""
    order = scores.argsort(dim=0, descending=True, stable=True)  # (images, classes): each class's ranking
    holds = torch.zeros(scores.shape, dtype=torch.bool)
    for row, own in enumerate(labels):
        holds[row, list(own)] = True
    precisions = []
    for c in range(classes):
        ranked = holds[order[:, c], c]
        hits = ranked.nonzero()[:, 0]  # 0-based ranks of the images holding class c
        precisions.append(sum((k + 1) / (int(rank) + 1) for k, rank in enumerate(hits)) / max(len(hits), 1))
    return sum(precisions) / len(precisions) if precisions else math.nan


def suite_summary(suite: suites.Suite, metrics: dict[str, Any]) -> dict[str, Any]:
    """A suite's figures as its authors report them: each member's acc1 and the figure its mean takes (DataComp's
    `main_metric`), the mean over the members scored, and whether that is the suite's own mean (every member scored) or
    a part of it, with the members not scored counted and named."""
    scored = {m.name: metrics[m.name] for m in suite.members if isinstance(metrics.get(m.name), dict)}
    figures = {m.name: scored[m.name].get(m.main_metric) for m in suite.members if m.name in scored}
    lacking = [m.name for m in suite.members if m.name not in scored]
    return {
        "title": suite.title, "source": suite.source, "mean_rule": suite.mean_rule, "members": len(suite.members),
        "scored": len(scored), "not_scored": lacking, "complete": not lacking,
        "acc1": {name: m.get("acc1") for name, m in scored.items()},
        "main_metric": {m.name: m.main_metric for m in suite.members if m.name in scored},
        "mean": mean(v for v in figures.values() if v is not None and not math.isnan(v)),
        **({"departs": suite.departs} if suite.departs else {}),
        **({"why_not_scored": {m.name: m.why for m in suite.members if m.why}} if any(m.why for m in suite.members) else {}),
    }


# the order a subset is drawn over: the class folders in name order, each one's files in name order. CLIC draws over a
# CLIP_benchmark dataset's own order (eval/eval_utils.py, shuffle_and_select), which no folder of images records.
SUBSET_ORDER = "class folders, then file names"


# where class names or templates came from, in the words `report --paper` compares (a paper's `classnames_source`)
FROM_JSON, FROM_DATASET, FROM_IMAGENET, FROM_FOLDERS = "clip_benchmark json", "dataset file", "imagenet", "folder names"


def seeded_subset(count: int, size: int, seed: int) -> list[int]:
    """CLIC's draw (eval/eval_utils.py, `shuffle_and_select` after `np.random.seed(args.seed)` in
    eval/eval_zeroshot_imagenet.py): the indices 0..count-1 shuffled by numpy's legacy generator, the first `size`."""
    import numpy as np

    indices = list(range(count))
    np.random.RandomState(seed).shuffle(indices)
    return indices[:size]


@register
class ZeroShot(Benchmark):
    name = "zeroshot"
    verdict = "top-1 accuracy"
    task = "zeroshot_classification"
    Options = Options
    layout = "zero-shot: DATA_ROOT/zeroshot/<dataset>/<class>/<image> class folders, one folder per dataset"
    columns = (("ImageNet", ("imagenet",)), ("zero-shot mean", ("overall",)), ("ZS shape", ("shape",)), ("ZS colour", ("color",)))

    def lacks(self, root, splits):
        if splits:
            members = [m for split in splits for m in suites.selection(split).members]
            wanted = [m.name for m in members if m.task == "classification"]
            if any(suites.find_wds_retrieval(root, m.reads) for m in members if m.task == "retrieval"):
                return None
            if not any(suites.find_folder(root / "zeroshot", name) for name in wanted):
                return (f"none of {', '.join(wanted[:5])}{' ...' if len(wanted) > 5 else ''} ({len(wanted)} sets) under "
                        f"{root / 'zeroshot'} (each looked for as zeroshot/{'|'.join(suites.folder_names(wanted[0]))} ...). {self.layout}"
                        if wanted else f"{', '.join(splits)}: no set compclip scores by zero-shot classification")
            return None
        return None if self.datasets(root) else f"looked for dataset folders in {root / 'zeroshot'}: none. {self.layout}"

    def departures(self, options, ties, pretrained, splits):
        options = options or Options()
        return [said for split in splits for said in suites.departures(split, options.subset)] + options.colours_departures()

    def chosen(self, root, splits) -> tuple[list[tuple[str, Path, str | None]], dict[str, str], list[suites.Suite], dict[str, Path]]:
        """The datasets a run scores, each (its name in the result, its folder, its CLIP_benchmark name where `splits`
        named it), what `splits` name and is not there or not scored here (a named skip each, path or member: why), the
        suites named, and the suites' retrieval members present ({member: its wds set's folder}). No splits: every dataset
        folder under zeroshot/, named by its folder."""
        if not splits:
            return [(folder.name, folder, None) for folder in self.datasets(root)], {}, [], {}
        chosen, skipped, named, retrieved = [], {}, [], {}
        for split in splits:
            picked = suites.selection(split)
            named += [picked.suite] if picked.suite else []
            for member in picked.members:
                folder = suites.find_folder(root / "zeroshot", member.name)
                if member.task == "retrieval":
                    self.retrieval_member(root, member, retrieved, skipped)
                elif member.task != "classification":
                    skipped[member.name] = f"not scored here: {member.why}"
                elif folder is None:
                    first, *others = suites.folder_names(member.name)
                    skipped[str(root / "zeroshot" / first)] = f"absent (CLIP_benchmark's {member.name}; looked for {', '.join(others)} too)"
                else:
                    chosen.append((member.name, folder, member.name))
        return list({name: (name, folder, clip) for name, folder, clip in chosen}.values()), skipped, named, retrieved

    @staticmethod
    def retrieval_member(root: Path, member: suites.Member, retrieved: dict[str, Path], skipped: dict[str, str]) -> None:
        """A suite's retrieval member: its wds set's folder into `retrieved`, or, absent, one named skip of where it was
        looked for."""
        folder = suites.find_wds_retrieval(root, member.reads)
        if folder is not None:
            retrieved[member.name] = folder
            return
        first, *others = suites.wds_retrieval_places(root, member.reads)
        skipped[str(first)] = (f"absent (CLIP_benchmark's wds/{member.reads}, the suite's {member.name}; looked for "
                               f"{', '.join(str(p.relative_to(root)) for p in others)} too)")

    def datasets(self, root) -> list[Path]:
        """The dataset folders under `zeroshot/`, less the wds sets of another task (`other_tasks`)."""
        return [p for p in self.folders(root) if not is_other_task(p)]

    def other_tasks(self, root) -> list[str]:
        """The wds sets whose dataset_type.txt names another task (DataComp's suite holds retrieval sets): not classified."""
        return [p.name for p in self.folders(root) if is_other_task(p)]

    @staticmethod
    def folders(root) -> list[Path]:
        folder = root / "zeroshot"
        return sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []

    def run(self, scorer, root, ties, splits=(), options=None):
        options = options or Options()
        classnames, templates = (read_json(Path(f)) if f else {} for f in (options.classnames, options.templates))
        metrics, missing, items = {}, Missing.of(scorer), []
        chosen, absent, named, retrieved = self.chosen(root, splits)
        for key, folder, clip_name in chosen:
            scorer.at(key)
            source = open_source(folder, options.colours)
            if source is not None and clip_name is not None:  # build_dataset's lookup keys of the name it was given
                source.keys = [f"wds/{suites.bare(clip_name)}", suites.bare(clip_name)] if source.layout == "wds" else [clip_name]
            if source is None:
                every, names, names_from, names_kind, prompts, prompts_from, prompts_kind, order = self.class_folders(
                    folder, classnames, templates, options)
            else:
                every, order = list(zip(source.images, source.multilabel or source.labels, strict=True)), source.order
                names, names_from, names_kind = self.source_classnames(source, classnames, options.classnames)
                prompts, prompts_from, prompts_kind = self.source_prompts(source, names, templates, options.templates)
                absent.update(source.absent)
            drawn = bool(options.subset) and key not in options.subset_skip.split(",")
            if drawn:
                every = [every[i] for i in seeded_subset(len(every), options.subset, options.subset_seed)]
            kept = [(p, label) for p, label in every if missing.keep([p])]
            files, labels = [p for p, _ in kept], [label for _, label in kept]
            scores = scorer.class_scores(files, prompts)
            # how the subset was drawn and where names and prompts came from, as `report --paper` compares them
            drawing = {"subset": options.subset, "subset_seed": options.subset_seed, "subset_order": SUBSET_ORDER} if drawn else {}
            if drawn and source is not None:
                drawing["subset_order"] = order
            provenance = {"classes": len(names), **drawing, "prompts": sum(map(len, prompts)), "classnames_from": names_from,
                          "templates_from": prompts_from, "classnames_source": names_kind, "templates_source": prompts_kind,
                          "layout": source.layout if source else "class folders"}
            if source is not None and source.multilabel is not None:
                metrics[key] = {"mean_average_precision": mean_average_precision(scores, labels, len(names)), "n": len(labels),
                                **provenance}
                continue
            target = torch.tensor(labels, dtype=torch.long)
            correct = protocols.picks(scores, target, ties)
            items += class_rows(key, [str(f) for f in files], labels, names, scores, correct, folder)
            metrics[key] = {**accuracy(correct), **clip_benchmark_metrics(scores, target, correct), **provenance}
        items += self.score_retrieval(scorer, retrieved, ties, options, missing, absent, metrics)
        datasets = [m for m in metrics.values() if "acc" in m]  # the single-label ones: a multi-label set has no accuracy
        metrics["overall"] = mean(m["acc"] for m in datasets)
        if not splits and self.other_tasks(root):
            metrics["other_tasks"] = self.other_tasks(root)
        for figure in ("acc1", "acc5", "mean_per_class_recall"):  # CLIP_benchmark's keys, over the datasets
            metrics[figure] = mean(m[figure] for m in datasets)
        for suite in named:
            summary = metrics.setdefault("suites", {})[suite.name] = suite_summary(suite, metrics)
            log.info("%s: %d of its %d sets scored%s; %s: %.4f%s", suite.name, summary["scored"], summary["members"],
                     f" ({len(summary['not_scored'])} not: {', '.join(summary['not_scored'])})" if summary["not_scored"] else "",
                     suite.mean_rule, summary["mean"], "" if summary["complete"] else ", over the sets scored: not the suite's own mean")
        return Result(metrics, missing, absent, items=items)

    @staticmethod
    def score_retrieval(scorer, retrieved: dict[str, Path], ties: str, options: Options, missing: Missing, absent: dict[str, str],
                        metrics: dict[str, Any]) -> list:
        """A suite's retrieval members, each scored into `metrics` by the retrieval benchmark as `--dataset NAME` scores it
        alone (CLIP_benchmark's raw captions, this run's colours), with its `mean_recall@k`; their item rows."""
        items, reader = [], retrieval.Retrieval()
        for key, folder in retrieved.items():
            scored, rows = reader.score(scorer, key, folder, ties, retrieval.Options(colours=options.colours), missing, absent)
            if scored is not None:
                metrics[key] = {**scored, **retrieval.mean_recalls([scored])}
                items += rows
        return items

    def class_folders(self, folder: Path, classnames: dict[str, Any], templates: dict[str, Any], options: Options):
        """A folder of class folders: its (image, label) pairs, class names and prompts with their sources, and its order."""
        classes = sorted(p for p in folder.iterdir() if p.is_dir())
        names, names_from, names_kind = self.classnames(folder, classes, classnames, options.classnames)
        if len(names) != len(classes):
            raise DataError(f"{folder}: {len(classes)} class folders but {len(names)} class names (from {names_from})")
        prompts, prompts_from, prompts_kind = self.prompts(folder, names, templates, options.templates)
        every = [(p, label) for label, c in enumerate(classes) for p in sorted(c.iterdir()) if p.suffix.lower() in IMAGE_SUFFIXES]
        return every, names, names_from, names_kind, prompts, prompts_from, prompts_kind, SUBSET_ORDER

    @staticmethod
    def source_classnames(source: Source, table: dict[str, Any], file: str | None) -> tuple[list[str], str, str]:
        """build_dataset's choice: the custom JSON's entry where it has one, else the dataset's own names."""
        key = next((k for k in source.keys if k in table), None)
        if key is not None:
            return table[key], f"{file}[{key}]", FROM_JSON
        return source.classnames, source.classnames_from, FROM_DATASET

    @staticmethod
    def source_prompts(source: Source, names: list[str], table: dict[str, Any], file: str | None) -> tuple[list[list[str]], str, str]:
        """build_dataset's choice: the custom JSON (the dataset's keys, then imagenet1k), else the dataset's own templates
        (a wds set's), else CLIP_benchmark's bundled templates (the dataset's keys, then imagenet1k)."""
        custom = next((k for k in [*source.keys, "imagenet1k"] if k in table), None)
        bundled = clip_benchmark_json("templates")
        if custom is not None:
            chosen, where, kind = table[custom], f"{file}[{custom}]", FROM_JSON
        elif source.templates is not None:
            chosen, where, kind = source.templates, source.templates_from, FROM_DATASET
        else:
            key = next(k for k in [*source.keys, "imagenet1k"] if k in bundled)
            chosen, where, kind = bundled[key], f"CLIP_benchmark's en_zeroshot_classification_templates.json[{key}]", FROM_JSON
        return class_prompts(chosen, names, where), where, kind

    @staticmethod
    def keys(folder: Path) -> list[str]:
        return [folder.name, "imagenet1k"] if folder.name == "imagenet" else [folder.name]

    def classnames(self, folder: Path, classes: list[Path], table: dict[str, Any], file: str | None) -> tuple[list[str], str, str]:
        """The class names, where they came from (for a person), and that source's kind (`FROM_*`)."""
        key = next((k for k in self.keys(folder) if k in table), None)
        if key is not None:
            return table[key], f"{file}[{key}]", FROM_JSON
        if (folder / "classnames.txt").is_file():
            return _lines(folder / "classnames.txt"), str(folder / "classnames.txt"), FROM_DATASET
        if folder.name == "imagenet":
            return imagenet()["classnames"], "ImageNet's class names (bundled)", FROM_IMAGENET
        return [c.name.replace("_", " ") for c in classes], "the class folders' names", FROM_FOLDERS

    def prompts(self, folder: Path, names: list[str], table: dict[str, Any], file: str | None) -> tuple[list[list[str]], str, str]:
        """Each class's prompts, where they came from (for a person), and that source's kind (`FROM_*`)."""
        key = next((k for k in [*self.keys(folder), "imagenet1k"] if k in table), None)
        if key is not None:
            chosen, where, kind = table[key], f"{file}[{key}]", FROM_JSON
        elif (folder / "templates.txt").is_file():
            chosen, where, kind = _lines(folder / "templates.txt"), str(folder / "templates.txt"), FROM_DATASET
        else:
            chosen, where, kind = imagenet()["templates"], "ImageNet's 80 templates (bundled)", FROM_IMAGENET
        return class_prompts(chosen, names, where), where, kind
