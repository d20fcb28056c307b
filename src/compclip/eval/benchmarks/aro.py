"""ARO (Yuksekgonul et al., 2023): VG-Relation, VG-Attribution, COCO-Order, Flickr30k-Order.

Layout, as the repository's `dataset_zoo` (github.com/mertyg/vision-language-models-are-bows) downloads them:
- `aro/` is its ARO_ROOT: `visual_genome_relation.json`, `visual_genome_attribution.json` and `images/`
  (`vgr_vga_images.zip` unzipped);
- `coco/` is its COCO_ROOT: `coco_karpathy_test.json` beside `val2014/`;
- `flickr30k/` is its FLICKR_ROOT: `flickr30k_test.json` beside `flickr30k-images/`.

Rules, from `dataset_zoo/aro_datasets.py` and the notebook `notebooks/Replicate ARO! VG-Relation, VG-Attribution.ipynb`:
- VG-Relation and VG-Attribution score the image cropped to the record's box; the options are [false, true] and
  the argmax must be the true one, so a tie is wrong. VG-Relation's `macro` is the mean over relations of their
  accuracies, leaving out the notebook's list of symmetric relations ("next to", "near", ...); VG-Attribution's
  the mean over attribute pairs with at least 25 records (`evaluate_scores`). Per-relation and per-pair accuracies
  are in the result, with the micro accuracy over all records.
- COCO- and Flickr30k-Order rank each caption against four perturbations of it (`perturbations.py`, `TextShuffler`):
  nouns and adjectives shuffled (spaCy's fine-grained tags NN*, JJ*), everything else shuffled, words shuffled
  within trigrams, trigrams shuffled; every option lower-cased and stripped of punctuation by `pre_caption`
  (30 words at most). The true caption is listed first and the argmax taken, so a tie goes to it. The perturbations
  are drawn as `main_aro.py` draws them (NumPy's and Python's generators seeded with its default seed 1, one
  caption after another in file order); the trigram shuffles split the caption into spaCy's tokens where the
  repository uses NLTK's `word_tokenize`, whose tokenizer data is a separate download.
"""
from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path

import numpy as np
import torch

from ...options import option
from .. import protocols
from ..base import Benchmark, Missing, Result, acc_of, accuracy, first_option_wins, grouped, mean, mean_present, read_json, register
from ..items import choice_rows

# The notebook's `symmetric` list: relations whose swapped caption may still be true, left out of VG-Relation's macro.
SYMMETRIC = frozenset((
    "adjusting", "attached to", "between", "bigger than", "biting", "boarding", "brushing", "chewing", "cleaning", "climbing",
    "close to", "coming from", "coming out of", "contain", "crossing", "dragging", "draped over", "drinking", "drinking from",
    "driving", "driving down", "driving on", "eating from", "eating in", "enclosing", "exiting", "facing", "filled with",
    "floating in", "floating on", "flying", "flying above", "flying in", "flying over", "flying through", "full of", "going down",
    "going into", "going through", "grazing in", "growing in", "growing on", "guiding", "hanging from", "hanging in", "hanging off",
    "hanging over", "higher than", "holding onto", "hugging", "in between", "jumping off", "jumping on", "jumping over", "kept in",
    "larger than", "leading", "leaning over", "leaving", "licking", "longer than", "looking in", "looking into", "looking out",
    "looking over", "looking through", "lying next to", "lying on top of", "making", "mixed with", "mounted on", "moving",
    "on the back of", "on the edge of", "on the front of", "on the other side of", "opening", "painted on", "parked at",
    "parked beside", "parked by", "parked in", "parked in front of", "parked near", "parked next to", "perched on", "petting",
    "piled on", "playing", "playing in", "playing on", "playing with", "pouring", "reaching for", "reading", "reflected on",
    "riding on", "running in", "running on", "running through", "seen through", "sitting behind", "sitting beside", "sitting by",
    "sitting in front of", "sitting near", "sitting next to", "sitting under", "skiing down", "skiing on", "sleeping in",
    "sleeping on", "smiling at", "sniffing", "splashing", "sprinkled on", "stacked on", "standing against", "standing around",
    "standing behind", "standing beside", "standing in front of", "standing near", "standing next to", "staring at", "stuck in",
    "surrounding", "swimming in", "swinging", "talking to", "topped with", "touching", "traveling down", "traveling on", "tying",
    "typing on", "underneath", "wading in", "waiting for", "walking across", "walking by", "walking down", "walking next to",
    "walking through", "working in", "working on", "worn on", "wrapped around", "wrapped in", "by", "of", "near", "next to", "with",
    "beside", "on the side of", "around",
))
NOUNS, ADJECTIVES = ("NN", "NNS", "NNP", "NNPS"), ("JJ", "JJR", "JJS")
ORDER_SETS = {  # split: (root folder, annotation file); images at root / record["image"]
    "coco_order": ("coco", "coco_karpathy_test.json"),
    "flickr30k_order": ("flickr30k", "flickr30k_test.json"),
}


def pre_caption(caption: str, max_words: int = 30) -> str:
    """`dataset_zoo/retrieval.py`'s `pre_caption`: lower case, these punctuation marks to spaces, spaces collapsed, at most
    `max_words` words."""
    caption = re.sub(r"([.!\"()*#:;~])", " ", caption.lower())
    caption = re.sub(r"\s{2,}", " ", caption).rstrip("\n").strip(" ")
    return " ".join(caption.split(" ")[:max_words])


class Shuffler:
    """`TextShuffler`'s four perturbations, drawing from generators seeded once and used caption after caption."""

    def __init__(self, seed: int):
        self.numpy, self.python = np.random.RandomState(seed), random.Random(seed)

    def perturb(self, doc) -> list[str]:
        """The four perturbations of a parsed caption, in `COCO_Order`'s order."""
        return [self.nouns_and_adjectives(doc), self.all_but_nouns_and_adjectives(doc), self.within_trigrams(doc), self.trigrams(doc)]

    def nouns_and_adjectives(self, doc) -> str:
        text = np.array([t.text for t in doc])
        for tags in (NOUNS, ADJECTIVES):
            idx = [i for i, t in enumerate(doc) if t.tag_ in tags]
            text[idx] = self.numpy.permutation(text[idx])
        return " ".join(text)

    def all_but_nouns_and_adjectives(self, doc) -> str:
        text = np.array([t.text for t in doc])
        others = np.ones(text.shape[0])
        others[[i for i, t in enumerate(doc) if t.tag_ in NOUNS + ADJECTIVES]] = 0
        others = others.astype(bool)
        text[others] = self.numpy.permutation(text[others])
        return " ".join(text)

    @staticmethod
    def _trigrams(doc) -> list[list[str]]:
        words = [t.text for t in doc]
        return [words[i : i + 3] for i in range(0, len(words), 3)]

    def within_trigrams(self, doc) -> str:
        trigrams = self._trigrams(doc)
        for trigram in trigrams:
            self.python.shuffle(trigram)
        return " ".join(" ".join(t) for t in trigrams)

    def trigrams(self, doc) -> str:
        trigrams = self._trigrams(doc)
        self.python.shuffle(trigrams)
        return " ".join(" ".join(t) for t in trigrams)


@dataclasses.dataclass(frozen=True)
class RelationOptions:
    exclude_symmetric: bool = option(True, "leave the notebook's symmetric relations out of the macro accuracy, as the paper; "
                                           "false: the mean over every relation")


@dataclasses.dataclass(frozen=True)
class AttributionOptions:
    min_count: int = option(25, "attribute pairs with fewer records are left out of the macro accuracy (evaluate_scores)")


@dataclasses.dataclass(frozen=True)
class OrderOptions:
    preprocess: bool = option(True, "pre_caption every option (lower case, no punctuation, 30 words), as the repository; "
                                    "false: raw captions")
    seed: int = option(1, "seed of the perturbations (main_aro.py's default)")


class _VGPairs(Benchmark):
    task = "image_caption_selection"
    file = ""
    spectrum = "aro"  # with the order sets: vl_compo's four ARO parts (`aro::VG_Relation`, `aro::VG_Attribute`, ...)
    layout = ("ARO: visual_genome_relation.json, visual_genome_attribution.json and images/ (vgr_vga_images.zip unzipped) "
              "in DATA_ROOT/aro/, where the repository's dataset_zoo downloads them into ARO_ROOT")

    def lacks(self, root, splits):
        return self.missing_files(root, [root / "aro" / self.file])

    def spectrum_parts(self, metrics):
        return [acc_of(metrics, "macro")]

    def images(self, root):
        return list(dict.fromkeys(root / "aro" / "images" / r["image_path"] for r in read_json(root / "aro" / self.file)))

    def run(self, scorer, root, ties, splits=(), options=None):
        options = options or self.Options()
        records = read_json(root / "aro" / self.file)
        missing = Missing.of(scorer)
        kept = [(k, r) for k, r in enumerate(records) if missing.keep([root / "aro" / "images" / r["image_path"]])]
        ids, kept = [k for k, _ in kept], [r for _, r in kept]
        boxes = [(r["bbox_x"], r["bbox_y"], r["bbox_x"] + r["bbox_w"], r["bbox_y"] + r["bbox_h"]) for r in kept]
        images = [root / "aro" / "images" / r["image_path"] for r in kept]
        pos = scorer.pairs(images, [r["true_caption"] for r in kept], boxes)
        neg = scorer.pairs(images, [r["false_caption"] for r in kept], boxes)
        correct = protocols.pair_accuracy(pos, neg, ties)
        items = choice_rows("", ids, images, [(r["true_caption"], r["false_caption"]) for r in kept], torch.stack([pos, neg], 1), correct)
        for row, r in zip(items, kept, strict=True):
            row["group"] = self.group(r)
        groups = grouped(correct, [self.group(r) for r in kept])
        counted = [g for g, m in groups.items() if self.in_macro(g, m["n"], options)]
        metrics = {"macro": mean(groups[g]["acc"] for g in counted), "macro_groups": len(counted), **accuracy(correct), self.groups: groups}
        return Result(metrics, missing, items=items)


@register
class VGRelation(_VGPairs):
    name = "aro_vg_relation"
    file, groups = "visual_genome_relation.json", "relations"
    kind = "relation"  # the paper's VG-Relation: the false caption's objects swapped around a relation
    Options = RelationOptions

    @staticmethod
    def group(record) -> str:
        return record["relation_name"]

    @staticmethod
    def in_macro(group: str, n: int, options: RelationOptions) -> bool:
        return not (options.exclude_symmetric and group in SYMMETRIC)


@register
class VGAttribution(_VGPairs):
    name = "aro_vg_attribution"
    file, groups = "visual_genome_attribution.json", "attribute_pairs"
    kind = "attribute"  # the paper's VG-Attribution: the false caption's attributes swapped between its objects
    Options = AttributionOptions

    @staticmethod
    def group(record) -> str:
        return f"{record['attributes'][0]}_{record['attributes'][1]}"

    @staticmethod
    def in_macro(group: str, n: int, options: AttributionOptions) -> bool:
        return n >= options.min_count


@register
class AROOrder(Benchmark):
    name = "aro_order"
    task = "image_caption_selection"
    ties = "clip_benchmark"
    splits = tuple(ORDER_SETS)
    Options = OrderOptions
    spectrum = "aro"
    layout = ("ARO order sets: coco_karpathy_test.json beside val2014/ in DATA_ROOT/coco/, flickr30k_test.json beside "
              "flickr30k-images/ in DATA_ROOT/flickr30k/, where the repository's dataset_zoo puts them (COCO_ROOT, FLICKR_ROOT)")
    misplaced = (("aro/coco_karpathy_test.json", "the order sets go beside their images: coco/coco_karpathy_test.json, "
                                                 "flickr30k/flickr30k_test.json"),)

    def images(self, root):
        return list(dict.fromkeys(root / ORDER_SETS[s][0] / r["image"] for s in self.splits if self.file(root, s).is_file()
                                  for r in read_json(self.file(root, s))))

    def spectrum_parts(self, metrics):
        return [acc_of(metrics, s) for s in self.splits]

    @staticmethod
    def file(root: Path, split: str) -> Path:
        folder, name = ORDER_SETS[split]
        return root / folder / name

    def lacks(self, root, splits):
        chosen = splits or self.splits
        return None if any(self.file(root, s).is_file() for s in chosen) else self.missing_files(root, [self.file(root, s) for s in chosen])

    def examples(self, root: Path, split: str, options: OrderOptions) -> list[tuple[Path, list[str]]]:
        """Every caption of a split as (image, [caption, its four perturbations]), drawn in file order whether its image is
        there or not, so the draws do not depend on which images a user has."""
        from ...concepts import load_nlp

        records = read_json(self.file(root, split))
        captions = [(root / ORDER_SETS[split][0] / r["image"], c) for r in records for c in r["caption"]]
        shuffler, prep = Shuffler(options.seed), pre_caption if options.preprocess else str
        docs = load_nlp().pipe(c for _, c in captions)
        return [(image, [prep(c), *map(prep, shuffler.perturb(doc))]) for (image, c), doc in zip(captions, docs, strict=True)]

    def run(self, scorer, root, ties, splits=(), options=None):
        options = options or OrderOptions()
        missing, metrics, absent, items = Missing.of(scorer), {}, {}, []
        for split in splits or self.splits:
            scorer.at(split)
            if not self.file(root, split).is_file():
                absent[str(self.file(root, split))] = f"absent: {split} not scored"
                continue
            kept = [(k, image, opts) for k, (image, opts) in enumerate(self.examples(root, split, options)) if missing.keep([image])]
            correct, scores = first_option_wins(scorer, [image for _, image, _ in kept], [opts for _, _, opts in kept], ties)
            metrics[split] = accuracy(correct)
            items += choice_rows(split, [k for k, _, _ in kept], [image for _, image, _ in kept], [opts for _, _, opts in kept],
                                 scores, correct)
        metrics["overall"] = mean_present(m["acc"] for m in metrics.values())
        return Result(metrics, missing, absent, items)
