"""Fine-grained concept understanding (Rösch et al.; docs/methods.md §2): rank a caption against every
permutation of one of its keywords (other colours, other objects, the swapped location or size), top-1
accuracy per class. COCO val2017 captions and images; every caption with a keyword of the class (option
`max_per_class` draws that many with a fixed seed); objects named as the paper's Table 6 (option `object_names`)."""
from __future__ import annotations

import dataclasses
import random

from ...concepts.keywords import KEYWORDS, OBJECT_TABLES, find_keywords, replacements, with_case_of
from ...errors import UsageError
from ...options import option
from ..base import Benchmark, Missing, Result, accuracy, first_option_wins, mean, read_json, register
from ..items import choice_rows
from .sugarcrepe import coco_image


@dataclasses.dataclass(frozen=True)
class Options:
    object_names: str = option("paper", "object table: paper (Table 6's names) or coco (COCO's category names)")
    max_per_class: int = option(0, "captions per class, drawn with a fixed seed (0: every caption with a keyword, as the paper's "
                                   "Table 8 subsets)")

    def __post_init__(self):
        if self.object_names not in OBJECT_TABLES:
            raise UsageError(f"--bench-opt concept_ranking.object_names must be one of {', '.join(OBJECT_TABLES)}, "
                             f"not {self.object_names!r}")
        if self.max_per_class < 0:
            raise UsageError(f"--bench-opt concept_ranking.max_per_class must be 0 (every caption) or more, not {self.max_per_class}")


@register
class ConceptRanking(Benchmark):
    name = "concept_ranking"
    task = "image_caption_selection"
    splits = tuple(KEYWORDS)
    Options = Options
    seed = 0
    layout = ("concept ranking: COCO's captions_val2017.json in DATA_ROOT/coco/ (`compclip data download coco_captions`), "
              "val2017/ beside it")

    def lacks(self, root, splits):
        return self.missing_files(root, [root / "coco" / "captions_val2017.json"])

    def examples(self, root, classes=KEYWORDS, objects: str = "paper", limit: int = 0) -> dict[str, list[tuple[str, list[str]]]]:
        """Per class: (image file, [true caption, permutations...]); with `limit`, that many drawn with the class's seed."""
        coco = read_json(root / "coco" / "captions_val2017.json")
        files = {im["id"]: im["file_name"] for im in coco["images"]}
        out = {}
        for cls in classes:  # each class drawn from its own seeded generator, so one class alone draws what it draws in all
            rng = random.Random(f"{self.seed}:{cls}")
            found = []
            for ann in coco["annotations"]:
                caption = ann["caption"].strip()
                hit = next((h for h in find_keywords(caption, (cls,), objects)), None)
                if hit is not None:
                    _, keyword, start, end = hit
                    swaps = [caption[:start] + with_case_of(w, caption[start:end]) + caption[end:]
                             for w in replacements(cls, keyword, objects)]
                    found.append((files[ann["image_id"]], [caption, *swaps]))
            out[cls] = rng.sample(found, min(limit, len(found))) if limit else found
        return out

    def run(self, scorer, root, ties, splits=(), options=None):
        missing, metrics, items = Missing.of(scorer), {}, []
        options = options or Options()
        for cls, examples in self.examples(root, splits or self.splits, options.object_names, options.max_per_class).items():
            scorer.at(cls)
            kept = [e for e in examples if missing.keep([coco_image(root, e[0])])]
            images = [coco_image(root, f) for f, _ in kept]
            correct, scores = first_option_wins(scorer, images, [opts for _, opts in kept], ties)
            metrics[cls] = {**accuracy(correct), "options": len(kept[0][1]) if kept else 0}
            items += choice_rows(cls, [f for f, _ in kept], images, [opts for _, opts in kept], scores, correct)
        metrics["overall"] = mean(m["acc"] for m in metrics.values())
        return Result(metrics, missing, items=items)
