"""Image-text retrieval, Recall@1/5/10 both ways (CLIP_benchmark's `zeroshot_retrieval` metric and names: a query
counts at k when one of its matches ranks in the top k).

Every folder under `retrieval/` is a dataset, read from the first of these it holds:
- `captions.csv`: `image,caption` rows (several per image);
- a Karpathy split file `dataset_*.json` (COCO 5k / Flickr30k 1k test): its `test` images at `filepath/filename`,
  COCO's beside `val2014/`, Flickr30k's in `flickr30k-images/` as its archive extracts;
- CLIP_benchmark's files: `coco_test_karpathy.json` (COCO caption format) beside `val2014/` (`mscoco_captions`),
  or `flickr30k_test_karpathy.txt` / `flickr8k_test_karpathy.txt` beside the images (`flickr30k`, `flickr8k`);
- BLIP's and ARO's Karpathy test files (`coco_karpathy_test.json`, CLIC's `coco_karpathy_test_2017.json`,
  `flickr30k_test.json`): a list of `{"image", "caption": [...]}`, the image path relative to the folder;
- COCO 2017's own `captions_val2017.json` (beside the folder or in its `annotations/`), images in `val2017/`
  (or FLAIR's `images/val2017/`): the 5,000 val2017 images and their 25,014 captions;
- FLAIR's pre-split fine-grained files (`annotations/test_annotations.json` for DOCCI, `test_annotations.json` for
  IIW): `{"annotations": [{"image_id", "image", "caption", "caption_id"}]}`, one sentence a caption;
- `long_captions.jsonl`: `{"image", "caption"}` long descriptions, split into sentences (option `sentences`);
- CLIP_benchmark's WebDataset sets (`wds/mscoco_captions`, `wds/flickr30k`, ...: the Hub's `clip-benchmark/wds_<name>`
  downloaded into the folder): `dataset_type.txt` and `test/nshards.txt` beside the shards `test/0.tar` ..., read shard
  by shard as CLIP_benchmark reads them (`wds_retrieval`).
Image names are looked up in the folder, then in its `images/` and `flickr30k-images/`. The gallery holds each image file
once, however many names reach it (a folder linked into itself, `images/sub -> .`, gives every photo a second one).

Options: `captions=pre_caption` passes every caption through ARO's and BLIP's `pre_caption` (CLIC's retrieval).
"""
from __future__ import annotations

import csv
import dataclasses
import logging
import re
import sys
from pathlib import Path
from typing import ClassVar

import torch

from ...data import image_path
from ...data.images import ImageRef
from ...errors import DataError, UsageError
from ...options import option
from ...text import sentences
from .. import protocols
from ..base import Benchmark, Missing, Result, mean, noted, read_json, read_jsonl, register
from ..items import retrieval_rows
from ..suites import folder_names
from ..zeroshot_sources import LayoutColours
from .wds_retrieval import SHARDS, is_wds, read_wds

log = logging.getLogger("compclip.eval")

KS = (1, 5, 10)
IMAGE_FOLDERS = ("images", "flickr30k-images")
LAYOUTS = ("captions.csv", "dataset_*.json", "coco_test_karpathy.json", "flickr30k_test_karpathy.txt", "flickr8k_test_karpathy.txt",
           "coco_karpathy_test.json", "coco_karpathy_test_2017.json", "flickr30k_test.json", "captions_val2017.json",
           "annotations/captions_val2017.json", "annotations/test_annotations.json", "test_annotations.json", "long_captions.jsonl")
BLIP_LISTS = ("coco_karpathy_test.json", "coco_karpathy_test_2017.json", "flickr30k_test.json")
SENTENCES = ("flair", "compclip")
CAPTIONS = ("raw", "pre_caption")
WDS_LAYOUT = "wds"  # the result's `layout` for a WebDataset set


@dataclasses.dataclass(frozen=True)
class Options(LayoutColours):
    benchmark: ClassVar[str] = "retrieval"

    sentences: str = option("flair", "how long_captions.jsonl descriptions become captions: flair (FLAIR's `split_caption`: at "
                                     "each line break, `</s>` and full stop) or compclip (at . ! ? before a space)")
    captions: str = option("raw", "raw (CLIP_benchmark: each caption as the file has it) or pre_caption (ARO's and BLIP's "
                                  "`pre_caption`: lower case, .!\"()*#:;~ to spaces, at most max_words words; CLIC's retrieval)")
    max_words: int = option(30, "pre_caption's word limit (CLIC's and ARO's retrieval: 30)")

    def __post_init__(self):
        super().__post_init__()
        for name, allowed in (("sentences", SENTENCES), ("captions", CAPTIONS)):
            if getattr(self, name) not in allowed:
                raise UsageError(f"--bench-opt retrieval.{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")
        if self.max_words < 1:
            raise UsageError(f"--bench-opt retrieval.max_words must be at least 1, not {self.max_words}")


def flair_sentences(text: str) -> list[str]:
    """FLAIR's `split_caption` (src/flair/data.py): the pieces between line breaks, `</s>` and full stops, stripped, empty
    ones dropped; how its DOCCI and IIW test annotations were split."""
    return [piece.strip() for piece in re.split(r"\n|</s>|[.]", text) if piece.strip()]


def pre_caption(caption: str, max_words: int = 30) -> str:
    """ARO's and BLIP's `pre_caption` (CLIC eval/retrieval_datasets.py, ARO dataset_zoo/retrieval.py): lower case,
    each of .!"()*#:;~ a space, runs of white space one space, at most `max_words` words."""
    caption = re.sub(r"([.!\"()*#:;~])", " ", caption.lower())
    caption = re.sub(r"\s{2,}", " ", caption).rstrip("\n").strip(" ")
    words = caption.split(" ")
    return " ".join(words[:max_words]) if len(words) > max_words else caption


def locate(folder: Path, name: str) -> Path:
    return image_path(folder, name, IMAGE_FOLDERS)


def layout_file(folder: Path) -> Path | None:
    """The first file of `LAYOUTS` the folder holds."""
    return next((f for pattern in LAYOUTS for f in sorted(folder.glob(pattern))), None)


def _not_utf8(file: Path) -> DataError:
    """The line and byte where `file` stops being UTF-8 (a text reader's error gives the offset in its chunk only)."""
    data = file.read_bytes()
    try:
        data.decode("utf-8")
        at = len(data)
    except UnicodeDecodeError as e:
        at = e.start
    line = data[:at].count(b"\n") + 1
    return DataError(f"{file}:{line}: not UTF-8 (byte {data[at:at + 1].hex()}); a benchmark's captions are read as UTF-8: "
                     "convert the file (iconv -f latin1 -t utf-8)")


def one_per_file(paths: list[Path | ImageRef]) -> tuple[list[Path | ImageRef], dict[Path | ImageRef, int]]:
    """The gallery: each image file once, told by what it is on disk (device and inode), under the first name that
    reaches it; and each name's place in it. Two names of one file as two gallery images would tie, or outrank, each
    other: a caption's own image beaten by its twin. An image inside a shard is told by its place there (a sample of its
    own, as CLIP_benchmark holds it)."""
    images: list[Path | ImageRef] = []
    place: dict[tuple[int, int] | str, int] = {}
    index = {}
    for path in dict.fromkeys(paths):
        if isinstance(path, ImageRef):
            key = path.key
        else:
            st = path.stat()
            key = (st.st_dev, st.st_ino)
        if key not in place:
            place[key] = len(images)
            images.append(path)
        index[path] = place[key]
    return images, index


def load_pairs(file: Path, options: Options | None = None) -> list[tuple[Path, str]]:
    """(image path, caption) pairs of a retrieval dataset, from its layout file, captions as `options` say."""
    options = options or Options()
    try:
        pairs = _file_pairs(file, options.sentences)
    except (KeyError, TypeError, AttributeError) as e:  # a record of another shape than the layout's
        raise DataError(f"{file}: a record lacks the layout's fields ({type(e).__name__}: {e}); {file.name} is read as "
                        "docs/data.md describes it") from None
    return captioned(pairs, options)


def captioned(pairs: list, options: Options) -> list:
    """`pairs` with their captions as `options.captions` says (raw: as read)."""
    if options.captions == "pre_caption":
        return [(p, pre_caption(c, options.max_words)) for p, c in pairs]
    return pairs


def _file_pairs(file: Path, split: str) -> list[tuple[Path, str]]:
    noted(file)  # read below by csv and as text too, not only by `read_json`: its SHA-256 is recorded all the same
    inside = file.parent.name == "annotations" and f"annotations/{file.name}" in LAYOUTS
    folder = file.parent.parent if inside else file.parent
    if file.name == "captions.csv":
        csv.field_size_limit(sys.maxsize)  # a long caption is a caption (csv's default stops at 131,072 characters)
        try:
            with open(file, newline="", encoding="utf-8-sig") as f:
                return [(locate(folder, r["image"].strip()), r["caption"]) for r in csv.DictReader(f)]  # as training reads it
        except UnicodeDecodeError:
            raise _not_utf8(file) from None
    if file.name.startswith("dataset_"):
        return [(locate(folder, str(Path(im.get("filepath", "")) / im["filename"])), s["raw"])
                for im in read_json(file)["images"] if im.get("split") == "test" for s in im["sentences"]]
    if file.name in BLIP_LISTS:  # BLIP's Karpathy files: [{"image": "val2014/...jpg", "caption": [...]}, ...]
        return [(locate(folder, ann["image"]), c) for ann in read_json(file)
                for c in ([ann["caption"]] if isinstance(ann["caption"], str) else ann["caption"])]
    if file.name == "test_annotations.json":  # FLAIR's pre-split sentences, each mapped to its image
        return [(locate(folder, ann["image"]), ann["caption"]) for ann in read_json(file)["annotations"]]
    if file.suffix == ".json":  # COCO caption format, read as torchvision's CocoCaptions: images by id, captions in order
        coco = read_json(file)
        captions: dict[int, list[str]] = {}
        for ann in coco["annotations"]:
            captions.setdefault(ann["image_id"], []).append(ann["caption"])
        images = "val2017" if file.name == "captions_val2017.json" else "val2014"
        return [(locate(folder, str(Path(images) / im["file_name"])), c)
                for im in sorted(coco["images"], key=lambda im: im["id"]) for c in captions.get(im["id"], [])]
    if file.suffix == ".txt":  # CLIP_benchmark's Flickr: a header line, then "name.jpg,caption" (the caption may hold commas)
        lines = file.read_text(encoding="utf-8-sig").splitlines()[1:]
        rows = (line.strip().split(".jpg,", 1) for line in lines if line.strip())
        return [(locate(folder, name + ".jpg"), caption) for name, caption in rows]
    if split == "flair":
        return [(locate(folder, r["image"]), piece) for r in read_jsonl(file) for piece in flair_sentences(r["caption"])]
    return [(locate(folder, r["image"]), r["caption"][a:b]) for r in read_jsonl(file) for a, b in sentences(r["caption"]) if b > a]


@register
class Retrieval(Benchmark):
    name = "retrieval"
    verdict = "R@1"  # a query's `correct`: its own image or caption retrieved first
    task = "zeroshot_retrieval"
    Options = Options
    layout = (f"retrieval: DATA_ROOT/retrieval/<dataset>/ folders, each with one of {', '.join(LAYOUTS)}, or a WebDataset set "
              f"(huggingface-cli download clip-benchmark/wds_<dataset> --repo-type dataset --local-dir DATA_ROOT/retrieval/<dataset>)")
    columns = (("retrieval R@1", ("mean_recall@1",)), ("retrieval R@5", ("mean_recall@5",)))

    def datasets(self, root, splits=()) -> list[Path]:
        """The dataset folders under `retrieval/`; with `splits` (CLIP_benchmark's names: `--dataset flickr30k`), theirs only."""
        folder = root / "retrieval"
        found = sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
        return [p for p in found if not splits or any(p.name in folder_names(split) for split in splits)]

    def lacks(self, root, splits):
        looked = f"{', '.join(f'retrieval/{n}' for split in splits for n in folder_names(split))}" if splits else "dataset folders"
        return None if self.datasets(root, splits) else f"looked for {looked} in {root}: none. {self.layout}"

    def departures(self, options, ties, pretrained, splits):
        return (options or Options()).colours_departures()

    def images(self, root) -> list:
        """Every image the dataset folders' captions name (for `compclip data check`), each once."""
        read = [self.read(folder, Options(), {}) for folder in self.datasets(root)]
        return list(dict.fromkeys(image for found in read if found for image, _ in found[1]))

    @staticmethod
    def read(folder: Path, options: Options, absent: dict[str, str]) -> tuple[str, list] | None:
        """(the layout read, its (image, caption) pairs) of a dataset folder: the first layout file it holds, else its
        WebDataset set; what is not there or skipped is named in `absent`; None where the folder holds neither."""
        file = layout_file(folder)
        if file is not None:
            return file.name, load_pairs(file, options)
        if is_wds(folder):
            found = read_wds(folder, options.colours)
            absent.update(found.absent)
            absent.update(found.malformed.named())
            return WDS_LAYOUT, captioned(found.pairs, options)
        absent[str(folder)] = f"no {', '.join(LAYOUTS)}, nor a WebDataset set's {SHARDS}: not scored"
        return None

    def run(self, scorer, root, ties, splits=(), options=None):
        missing, metrics, absent, items = Missing.of(scorer), {}, {}, []
        options = options or Options()
        for folder in self.datasets(root, splits):
            scored, rows = self.score(scorer, folder.name, folder, ties, options, missing, absent)
            if scored is not None:
                metrics[folder.name] = scored
                items += rows
        metrics.update(mean_recalls(metrics.values()))
        return Result(metrics, missing, absent, items)

    def score(self, scorer, name: str, folder: Path, ties: str, options: Options, missing: Missing,
              absent: dict[str, str]) -> tuple[dict | None, list]:
        """One dataset folder's recalls and item rows, scored under `name` (None where it holds no layout: named in
        `absent`); a zero-shot suite's retrieval members are scored by it too, each as it is scored alone."""
        scorer.at(name)
        read = self.read(folder, options, absent)
        if read is None:
            return None, []
        layout, pairs = read[0], [(p, c) for p, c in read[1] if missing.keep([p])]
        if not pairs:  # every image missing: nothing to rank
            recalls = {f"{d}_retrieval_recall@{k}": float("nan") for d in ("image", "text") for k in KS}
            return {**recalls, "images": 0, "captions": 0, "layout": layout}, []
        images, index = one_per_file([p for p, _ in pairs])
        if len(index) > len(images):
            twin = next(p for p, i in index.items() if images[i] != p)
            log.warning("retrieval/%s: %d image name(s) reach a file another name reached first (%s is %s): each file is "
                        "one gallery image", folder.name, len(index) - len(images), twin, images[index[twin]])
        owner = torch.tensor([index[p] for p, _ in pairs])
        scores = scorer.matrix(images, [c for _, c in pairs]).T  # (captions, images)
        positives = owner[:, None] == torch.arange(len(images))[None, :]
        ranks = protocols.query_ranks(scores, positives, ties), protocols.query_ranks(scores.T, positives.T, ties)
        t2i, i2t = ({k: (rank < k).float().mean().item() for k in KS} for rank in ranks)
        rows = retrieval_rows(name, images, [c for _, c in pairs], owner, scores, ranks)
        return {
            **{f"image_retrieval_recall@{k}": v for k, v in t2i.items()},
            **{f"text_retrieval_recall@{k}": v for k, v in i2t.items()},
            "images": len(images), "captions": len(pairs), "layout": layout,
        }, rows


def mean_recalls(scored) -> dict[str, float]:
    """CLIP_benchmark's and DataComp's `mean_recall@k` (DataComp's eval_utils/retr_eval.py: the mean of the text and
    image recalls), over the datasets `scored` (each one's metrics dict)."""
    sets = [m for m in scored if isinstance(m, dict)]
    return {f"mean_recall@{k}": mean((m[f"image_retrieval_recall@{k}"] + m[f"text_retrieval_recall@{k}"]) / 2 for m in sets)
            for k in KS}
