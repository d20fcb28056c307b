"""EqBen (Wang et al., ICCV 2023): two images that differ minimally (video frames, synthetic renders) and their two
captions; Winoground's text, image and group scores.

Layout: the release's annotation in `eqben/` with its images in `eqben/images/`: the small public subset the README
offers (`eqben_vllm.zip`: `all_select.json`, `images/<subset>/...`) unzipped into `eqben/`, or the full annotation the
README published in 2023-09 ("formalized similar to Winoground") under another name (`--bench-opt eqben.annotation=FILE`,
relative to `eqben/`). A record is `{image0, caption0, image1, caption1}`, images relative to `images/`; a caption
given as a list counts its first, as the release's `eqben_utils.py` loaders do (`EqBenAG`: "only use the first
caption in the caption list").

Rule: `evaluate_eqben_locally.py` (`cal_wino_score`): text right when c0 scores i0 above c1 and c1 scores i1 above c0
(`c0i0 > c1i0 and c1i1 > c0i1`), image right when each caption prefers its own image (`c0i0 > c0i1 and c1i1 > c1i0`),
group both; a tie wrong. Per subset, the first folder of `image0` (eqbenag, eqbenyoucook2, eqbengebc, eqbenkubric_loc,
eqbenkubric_attr, eqbenkubric_cnt, eqbensd: `SUBSET_LENGTH_INFO`), and `overall` over every record scored. A subset
of the annotation whose images are not there is counted missing; the release's YouCook2 frames are `.npy` arrays
(`process_img_npy`), which compclip does not decode: counted as unreadable, never scored. A record not of the release's
format (a field absent, a caption that is not a text or a non-empty list of texts, an image whose first folder is none
of the subsets) is skipped and named by its index, under its subset where it has one.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from ...options import option
from .. import protocols
from ..base import Benchmark, Malformed, Missing, Result, acc_of, json_records, rate, register
from ..items import grid_rows

SUBSETS = ("eqbenag", "eqbenyoucook2", "eqbengebc", "eqbenkubric_loc", "eqbenkubric_attr", "eqbenkubric_cnt", "eqbensd")
KINDS = {"eqbenkubric_loc": "spatial", "eqbenkubric_attr": "attribute", "eqbenkubric_cnt": "counting"}
FIELDS = ("image0", "caption0", "image1", "caption1")


@dataclasses.dataclass(frozen=True)
class Options:
    annotation: str = option("all_select.json", "the annotation file under DATA_ROOT/eqben/: the public subset's all_select.json, "
                                                "or the full release's annotation of the same records")


@register
class EqBen(Benchmark):
    name = "eqben"
    task = "image_caption_selection"
    splits = SUBSETS
    Options = Options
    spectrum = "eqben"  # the group score of each of the five sources, Kubric's three subsets averaged into one
    layout = ("EqBen: the README's public subset (eqben_vllm.zip: all_select.json and images/; the README's 'small EqBen "
              "subset' link, docs/data.md) unzipped into DATA_ROOT/eqben/, or the full annotation there (--bench-opt "
              "eqben.annotation=FILE) with the images in DATA_ROOT/eqben/images/ (the README's Google Cloud links)")

    def spectrum_parts(self, metrics):
        group = {s: acc_of(metrics, s, "group") for s in self.splits}
        kubric = [v for s, v in group.items() if s.startswith("eqbenkubric_")]
        return [v for s, v in group.items() if not s.startswith("eqbenkubric_")] + [
            None if None in kubric else sum(kubric) / len(kubric)]

    def kind_of(self, split):
        return KINDS.get(split)

    def file(self, root: Path, options: Options) -> Path:
        return root / self.name / options.annotation

    def lacks(self, root, splits):
        return self.missing_files(root, [self.file(root, Options())])

    def records(self, root: Path, options: Options, malformed: Malformed) -> list[dict]:
        """The annotation's records, each with its index as `id`, its captions' first and its subset; a record not of the
        release's format is skipped and named in `malformed`."""
        file = self.file(root, options)
        found = json_records(file, f"a list of {{{', '.join(FIELDS)}}} records")
        records = []
        for k, r in enumerate(found):
            why, subset = record_problem(r)
            if why:
                malformed.skip(f"{file} [{subset}]" if subset else str(file), k, why, subset)
                continue
            first = {c: r[c][0] if isinstance(r[c], list) else r[c] for c in ("caption0", "caption1")}
            records.append({"id": k, **r, **first, "subset": subset})
        return records

    def images(self, root):
        base = root / self.name / "images"
        return list(dict.fromkeys(base / r[i] for r in self.records(root, Options(), Malformed()) for i in ("image0", "image1")))

    def run(self, scorer, root, ties, splits=(), options=None):
        options = options or Options()
        missing, metrics, items, absent, together, malformed = Missing.of(scorer), {}, [], {}, [], Malformed()
        base = root / self.name / "images"
        records = self.records(root, options, malformed)
        for split in splits or self.splits:
            asked = [r for r in records if r["subset"] == split]
            if not asked:
                absent[f"{self.file(root, options)} [{split}]"] = "the annotation holds no record of this subset: not scored"
                continue
            scorer.at(split)
            kept = [r for r in asked if missing.keep([base / r["image0"], base / r["image1"]])]
            scores = torch.stack([  # (n, caption, image)
                torch.stack([scorer.pairs([base / r[f"image{i}"] for r in kept], [r[f"caption{c}"] for r in kept]) for i in (0, 1)], dim=-1)
                for c in (0, 1)], dim=1) if kept else torch.zeros(0, 2, 2)
            result = protocols.winoground(scores, ties)
            metrics[split] = {**{k: rate(v) for k, v in result.items()}, "n": len(kept), "n_missing": len(asked) - len(kept)}
            together.append(result)
            items += grid_rows(split, [r["id"] for r in kept], [(base / r["image0"], base / r["image1"]) for r in kept],
                               [(r["caption0"], r["caption1"]) for r in kept], scores, result["group"],
                               {"text_correct": result["text"], "image_correct": result["image"]})
        if together and sum(len(r["group"]) for r in together):
            metrics["overall"] = {k: rate(torch.cat([r[k] for r in together])) for k in ("text", "image", "group")}
        absent.update(malformed.named(splits))
        return Result(metrics, missing, absent, items)


def record_problem(record) -> tuple[str | None, str | None]:
    """Why a record is not of the release's format, or None; and its subset (None where it cannot be told)."""
    if not isinstance(record, dict):
        return f"a {type(record).__name__}, not a record object", None
    subset = record.get("image0").split("/")[0] if isinstance(record.get("image0"), str) else None
    lacking = [f for f in FIELDS if f not in record]
    if lacking:
        return f"no {', '.join(lacking)}", subset if subset in SUBSETS else None
    for image in ("image0", "image1"):
        if not isinstance(record[image], str) or not record[image].strip():
            return f"{image} is {record[image]!r}, not an image's path", subset if subset in SUBSETS else None
    if subset not in SUBSETS:
        return f"image0's first folder {subset!r} is none of the subsets ({', '.join(SUBSETS)})", None
    for caption in ("caption0", "caption1"):
        value = record[caption]
        first = value[0] if isinstance(value, list) and value else value
        if isinstance(value, list) and not value:
            return f"{caption} is an empty list, not a caption or a list of them", subset
        if not isinstance(first, str) or not first.strip():
            return f"{caption} is {value!r}, not a caption or a list of them", subset
    return None, subset
