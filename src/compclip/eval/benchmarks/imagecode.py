"""ImageCoDe (Krojer et al., ACL 2022): a contextual description and ten similar images (video frames or a static
set); the description must pick its image.

Layout: the McGill-NLP/imagecode repository's `data/valid_data.json` (`{set: {image index: description}}`; the test
set's labels are not public) in `imagecode/data/`, with the image sets (`image-sets.zip` from Zenodo) unzipped in
`imagecode/data/` as the README shows them: one folder a set, `img<N>.jpg`, N the frame number of a video's frame.

Rule: `baselines/clip/zero_shot.py` (McGill-NLP/imagecode at commit 609f07611aed2599f946c30d730f40a41af1079b): a
set's images sorted by N, the description (stripped) scored against each, right when the top-ranked image is the one at
its index; accuracy over all descriptions, over the static sets (`open-images` in the set's name) and over the video
ones. The release ranks with `(-similarities).argsort()` (`find_best_matches`): numpy's default sort of ten scores is an
insertion sort, which keeps equal scores in their order, so of equally scored images the first is chosen: a video's
described frame tied with an identical later frame counts right, tied with an earlier one wrong. That is CLIP_benchmark's
`argmax` rule, the official one here (`--ties official`, the default, or `clip_benchmark`); `--ties strict`, compclip's
stricter reading that counts every tie wrong, departs from the published column and is recorded so.
A set without its ten images leaves its descriptions out, counted missing (an image gone would shift the indices). A
description not of the release's format (not a text, or at an index that is not one of 0 to 9) is skipped and named by
its set and index.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch

from ...errors import DataError
from .. import protocols
from ..base import Benchmark, Malformed, Missing, Result, acc_of, rate, read_json, register
from ..download import Asset
from ..items import image_choice_rows

SPLITS = ("static", "video")
SET_SIZE = 10  # images a set holds
VALID = ("https://raw.githubusercontent.com/McGill-NLP/imagecode/609f07611aed2599f946c30d730f40a41af1079b/data/valid_data.json",
         "cb4b8482354ba9bac62b6e101f145f9e59722dcf3b3fd42583f5b6de12bc698a")  # the descriptions; the image sets come from Zenodo
FRAME = re.compile(r"img(\d+)\.jpg")
INDEX = re.compile(r"\d+")  # an image index as the release's keys write it


@register
class ImageCoDe(Benchmark):
    name = "imagecode"
    task = "image_caption_selection"
    splits = SPLITS
    ties = "clip_benchmark"  # the release's argsort of ten scores: the first of equal top scores is chosen
    spectrum = "imagecode"  # one accuracy over every item, static and video (an item-weighted mean of the two)
    layout = ("ImageCoDe: data/valid_data.json of github.com/McGill-NLP/imagecode in DATA_ROOT/imagecode/data/ (`compclip "
              "data download imagecode`), the image sets (https://zenodo.org/record/6518944/files/image-sets.zip, the README's) "
              "unzipped there: DATA_ROOT/imagecode/data/<set>/img<N>.jpg")
    assets = (Asset(VALID[0], "imagecode/data/valid_data.json", VALID[1]),)

    def spectrum_parts(self, metrics):
        return [acc_of(metrics, "overall") if all(acc_of(metrics, s) is not None for s in self.splits) else None]

    def departures(self, options, ties, pretrained, splits):
        if ties == "strict":
            return ["ties=strict counts a description whose image ties with another wrong, where the release's argsort "
                    "chooses the first of the equally scored images"]
        return []

    def file(self, root: Path) -> Path:
        return root / self.name / "data" / "valid_data.json"

    def lacks(self, root, splits):
        return self.missing_files(root, [self.file(root)])

    def sets(self, root: Path) -> dict[str, dict[str, str]]:
        file = self.file(root)
        found = read_json(file)
        if not isinstance(found, dict) or not all(isinstance(v, dict) for v in found.values()):
            raise DataError(f"{file}: not {{image set: {{image index: description}}}}")
        return found

    def frames(self, root: Path, image_set: str) -> list[Path]:
        """The set's images in the release's order: by the number in `img<N>.jpg`."""
        folder = root / self.name / "data" / image_set
        found = [p for p in folder.glob("img*.jpg") if FRAME.fullmatch(p.name)] if folder.is_dir() else []
        return sorted(found, key=lambda p: int(FRAME.fullmatch(p.name).group(1)))

    def images(self, root):
        return [p for image_set in self.sets(root) for p in self.frames(root, image_set)]

    def run(self, scorer, root, ties, splits=(), options=None):
        missing, metrics, items, absent, malformed = Missing.of(scorer), {}, [], {}, Malformed()
        sets = self.sets(root)
        together = []
        for split in splits or self.splits:
            scorer.at(split)
            asked = []
            for image_set, described in sets.items():
                if ("open-images" in image_set) == (split == "static"):
                    for index, text in described.items():
                        why = description_problem(index, text)
                        if why:
                            malformed.skip(f"{self.file(root)} [{split}]", f"{image_set}/{index}", why, split)
                        else:
                            asked.append((image_set, int(index), text.strip()))
            kept = []
            for image_set, index, text in asked:
                frames = self.frames(root, image_set)
                if len(frames) != SET_SIZE:  # an image gone shifts every index after it: the set cannot be scored
                    missing.files.setdefault(str(root / self.name / "data" / image_set), f"{len(frames)} of its {SET_SIZE} images")
                elif missing.keep(frames):
                    kept.append((image_set, index, text, frames))
            flat = [(frame, text) for _, _, text, frames in kept for frame in frames]
            scores = scorer.pairs([f[0] for f in flat], [f[1] for f in flat]) if flat else torch.zeros(0)
            rows = list(torch.split(scores, [len(k[3]) for k in kept])) if kept else []
            correct = torch.cat([protocols.picks(r[None], k[1], ties) for r, k in zip(rows, kept, strict=True)]) if kept \
                else torch.zeros(0, dtype=torch.bool)
            metrics[split] = {"acc": rate(correct), "n": len(kept), "n_missing": len(asked) - len(kept)}
            if asked and not kept:
                absent[f"{root / self.name / 'data'} [{split}]"] = f"no {split} image set found: not scored"
            together.append(correct)
            items += image_choice_rows(split, [f"{k[0]}/{k[1]}" for k in kept], [k[3] for k in kept], [k[2] for k in kept],
                                       [r.tolist() for r in rows], [k[1] for k in kept], correct)
        everything = torch.cat(together)
        if everything.numel():
            metrics["overall"] = rate(everything)
        absent.update(malformed.named())
        return Result(metrics, missing, absent, items)


def description_problem(index: str, text) -> str | None:
    """Why a set's entry is not the release's image index (0 to 9) and description (a text), or None."""
    if not INDEX.fullmatch(index) or int(index) >= SET_SIZE:
        return f"image index {index!r} is not one of 0 to {SET_SIZE - 1}"
    return None if isinstance(text, str) else f"the description is {text!r}, not a text"
