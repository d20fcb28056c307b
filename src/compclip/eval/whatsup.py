"""What'sUp (Kamath et al., 2023): spatial relations. Layout under `whatsup/`, as the authors release it:
- controlled sets `controlled_images_dataset.json` (A) and `controlled_clevr_dataset.json` (B):
  records `{"image_path", "caption_options"}` with the true caption first, paths relative to `whatsup/`
  (a leading `data/` is dropped);
- `coco_qa_one_obj.json`, `coco_qa_two_obj.json`: `[image_id, true caption, false caption]` on COCO
  val2017 (`coco/val2017/{id:012d}.jpg`); `vg_qa_one_obj.json`, `vg_qa_two_obj.json` likewise on
  `whatsup/vg_images/{id}.jpg` (GQA-spatial).
"""
from __future__ import annotations

from pathlib import Path

from .base import Benchmark, Missing, Result, accuracy, first_option_wins, mean, read_json, register

CONTROLLED = {"controlled_a": "controlled_images_dataset.json", "controlled_b": "controlled_clevr_dataset.json"}
QA = {
    "coco_one_obj": "coco_qa_one_obj.json", "coco_two_obj": "coco_qa_two_obj.json",
    "gqa_one_obj": "vg_qa_one_obj.json", "gqa_two_obj": "vg_qa_two_obj.json",
}


@register
class WhatsUp(Benchmark):
    name = "whatsup"
    task = "image_caption_selection"

    def required(self, root):
        return [root / "whatsup"]

    def _examples(self, root: Path):
        base = root / "whatsup"
        for split, file in CONTROLLED.items():
            if (base / file).is_file():
                yield split, [(base / r["image_path"].removeprefix("data/"), r["caption_options"]) for r in read_json(base / file)]
        for split, file in QA.items():
            if (base / file).is_file():
                image = (
                    (lambda i: root / "coco" / "val2017" / f"{int(i):012d}.jpg")
                    if split.startswith("coco")
                    else (lambda i: base / "vg_images" / f"{i}.jpg")
                )
                yield split, [(image(r[0]), [r[1], r[2]]) for r in read_json(base / file)]

    def run(self, scorer, root, ties):
        missing, metrics = Missing(), {}
        for split, examples in self._examples(root):
            kept = [e for e in examples if missing.keep([e[0]])]
            metrics[split] = accuracy(first_option_wins(scorer, [p for p, _ in kept], [options for _, options in kept], ties))
        metrics["overall"] = mean(m["acc"] for m in metrics.values())
        return Result(metrics, missing)
