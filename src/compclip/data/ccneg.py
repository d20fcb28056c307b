"""CC-Neg (Singh et al., CoN-CLIP's data) as its release hands it over, written as JSON lines compclip trains on.

The release (jaisidhsingh/CoN-CLIP@503388a, `ccneg_dataset/README.md`) is two torch files and two image folders:
`ccneg_preprocessed.pt` ({"image_paths": [...], "annotations": [...]}), `distractor_image_mapping.pt` (each training
record's nearest COCO train2017 images, first the closest), the CC3M subset's images, and COCO train2017 with its
`captions_train2017.json`. `FineTuningDatasetWithNegatives` (src/data/finetuning_datasets.py) reads them thus, and so does
`records` here:

- the last 40,000 records are the evaluation split, the rest training (`configs.num_ccneg_eval_samples`);
- an image path's prefix `/workspace/datasets/cc3m/` is the release folder (`path.replace(...)`);
- the caption is `annotations[i]["json"]["caption"]`, the negated caption `annotations[i]["sop_data"]["negative-prompt"]`
  with its commas taken out (`.replace(",", "")`);
- the distractor is COCO image `mapping[i][0]`, an index into torchvision's `CocoCaptions`, whose images are the
  annotation file's ids in sorted order (`self.ids = list(sorted(self.coco.imgs.keys()))`).

Both torch files are read with `torch.load(weights_only=True)`, which builds tensors, lists, dicts and strings and runs no
pickled code. A record without a caption, a negated caption or a distractor is skipped, counted and named.
"""
from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import DataError
from ..io import atomic_path
from .formats.captions_json import coco_files

log = logging.getLogger("compclip.data")

ANNOTATIONS, MAPPING = "ccneg_preprocessed.pt", "distractor_image_mapping.pt"
EVAL_RECORDS = 40_000  # configs.num_ccneg_eval_samples: the last records are the evaluation split
RELEASE_PREFIX = "/workspace/datasets/cc3m/"  # the authors' folder, which finetuning_datasets.py replaces by the release's


def _load(path: Path) -> Any:
    import torch

    if not path.is_file():
        raise DataError(f"{path}: no such file (CC-Neg's release holds {ANNOTATIONS} and {MAPPING}: ccneg_dataset/README.md)")
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # a file torch cannot read safely, whatever the reason, is named with its reason
        raise DataError(f"{path}: not a torch file of tensors, lists and strings ({type(e).__name__}: {str(e)[:200]}); "
                        "compclip runs no pickled code") from None


def coco_order(captions: Path, images: Path) -> list[Path]:
    """COCO's image files in torchvision `CocoCaptions`' order: the annotation file's image ids, sorted."""
    try:
        by_id = {int(i): name for i, name in coco_files(captions, json.loads(captions.read_text(encoding="utf-8"))["images"]).items()}
    except DataError:  # an id given two files: coco_files' own line
        raise
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"{captions}: not a COCO captions file with an 'images' list of id and file_name "
                        f"({type(e).__name__}: {e})") from None
    return [images / by_id[i] for i in sorted(by_id)]


def records(root: Path, coco_images: Path, coco_captions: Path, split: str = "train", skipped: Counter | None = None,
            ) -> Iterator[dict[str, str]]:
    """CC-Neg's `split` ("train" with distractors, or "eval") as records of image, caption, negated caption (and
    distractor image), in the release's order; `skipped` counts the records left out, by reason."""
    skipped = Counter() if skipped is None else skipped
    mapping = _load(root / MAPPING) if split == "train" else None
    coco = coco_order(coco_captions, coco_images) if split == "train" else []
    data = _load(root / ANNOTATIONS)
    try:
        paths, notes = data["image_paths"], data["annotations"]
    except (TypeError, KeyError):
        raise DataError(f"{root / ANNOTATIONS}: no 'image_paths' and 'annotations' lists, which the release's file holds") from None
    if len(paths) != len(notes):
        raise DataError(f"{root / ANNOTATIONS}: {len(paths)} image paths but {len(notes)} annotations; the release pairs them by index")
    cut = len(paths) - EVAL_RECORDS
    if cut <= 0:
        raise DataError(f"{root / ANNOTATIONS}: {len(paths)} records, no more than the {EVAL_RECORDS} of the evaluation split")
    for i in range(cut) if split == "train" else range(cut, len(paths)):
        note = notes[i]
        try:
            record = {"image": str(paths[i]).replace(RELEASE_PREFIX, f"{root}/"), "caption": note["json"]["caption"],
                      "negated_caption": note["sop_data"]["negative-prompt"].replace(",", "")}
        except (TypeError, KeyError, AttributeError) as e:
            skipped["no caption or negated caption"] += 1
            log.warning("%s: record %d skipped: no %s", root / ANNOTATIONS, i, e)
            continue
        if mapping is not None:
            distractor = _distractor(mapping, i, coco)
            if not isinstance(distractor, Path):
                skipped["no distractor"] += 1
                log.warning("%s: record %d skipped: no distractor among %d COCO images (%s)", root / MAPPING, i, len(coco), distractor)
                continue
            record["distractor_image"] = str(distractor)
        yield record


def _distractor(mapping: Any, i: int, coco: list[Path]) -> Path | str:
    """Record `i`'s distractor, COCO image `mapping[i][0]`, or why it has none. An index is counted from the first image:
    -1 is no image (Python's indexing would wrap it to the last)."""
    try:
        nearest = int(mapping[i][0])
    except (IndexError, KeyError, TypeError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    if not 0 <= nearest < len(coco):
        return f"index {nearest}, none of them"
    return coco[nearest]


def write_jsonl(root: Path, coco_images: Path, coco_captions: Path, out: Path, split: str = "train") -> tuple[int, Counter]:
    """`records` written to `out` as JSON lines, atomically: the count written and the skipped ones by reason."""
    skipped: Counter = Counter()
    written = 0
    with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for record in records(root, coco_images, coco_captions, split, skipped):
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            written += 1
    return written, skipped
