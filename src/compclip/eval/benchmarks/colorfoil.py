"""ColorFoil (Samin et al., 2024): a COCO val2017 image, one of its captions that names a colour, and the foil, the
caption with each colour word replaced by another drawn at random.

Layout: COCO's captions_val2017.json in `coco/` (`compclip data download coco_captions`), the val2017 images in
`coco/val2017/` (`compclip data download coco_val2017`), as the release builds the benchmark from them
(github.com/samin9796/ColorFoil `zero_shot_evaluation.ipynb`, commit 1020714f79858dd8c6cc7b882090beff8fa078e1).

Construction: the notebook's `prapare_data` and `create_foil`: for each image in the file's order, the first of its
captions (in the file's order) with a word, split on single spaces, that is a CSS3 colour name (webcolors'
`CSS3_NAMES_TO_HEX`, case as written); its foil replaces, word by word, each colour word everywhere in the caption (a plain
text replace) by one of ten common colours drawn uniformly (`random.randint(0, 9)`; the colour itself drawn, the one
before it in the list). The release draws unseeded; here every draw comes from one generator seeded with
`--bench-opt colorfoil.seed=N`, in the notebook's order, so a seed names one fixed set of foils. CLIP_benchmark's
`clip_benchmark/datasets/colorfoil.py` (LAION-AI/CLIP_benchmark, branch compositionality_tasks, commit
81c19cd93cb22b9c70423852eaacb07994891942) moves the notebook's test into the loop over words, which also takes every
later caption of the image, colour or not (a foil equal to its caption); the notebook's one caption per image is read
here. The notebook leaves out four greyscale images its processor could not read; every image is scored here.

Rule: the notebook's: right when the image scores the caption above its foil, a tie wrong: CLIP_benchmark's `acc` and
`text_acc` (one image: its `image_acc` is 1 by construction and not written). An image or caption record not of COCO's
format (no id, no `coco_url`, a caption that is not a text) is skipped and named by its place in the file.
"""
from __future__ import annotations

import dataclasses
import random
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

import torch

from ...errors import DataError
from ...options import option
from .. import protocols
from ..base import Benchmark, Malformed, Missing, Result, rate, read_json, register, text_problem
from ..items import choice_rows
from .sugarcrepe import coco_image

# the 147 colour keywords of CSS3 (webcolors' CSS3_NAMES_TO_HEX keys: both spellings of grey)
CSS3_KEYWORDS = """
aliceblue antiquewhite aqua aquamarine azure beige bisque black blanchedalmond blue blueviolet brown burlywood cadetblue
chartreuse chocolate coral cornflowerblue cornsilk crimson cyan darkblue darkcyan darkgoldenrod darkgray darkgreen darkgrey
darkkhaki darkmagenta darkolivegreen darkorange darkorchid darkred darksalmon darkseagreen darkslateblue darkslategray
darkslategrey darkturquoise darkviolet deeppink deepskyblue dimgray dimgrey dodgerblue firebrick floralwhite forestgreen
fuchsia gainsboro ghostwhite gold goldenrod gray green greenyellow grey honeydew hotpink indianred indigo ivory khaki
lavender lavenderblush lawngreen lemonchiffon lightblue lightcoral lightcyan lightgoldenrodyellow lightgray lightgreen
lightgrey lightpink lightsalmon lightseagreen lightskyblue lightslategray lightslategrey lightsteelblue lightyellow lime
limegreen linen magenta maroon mediumaquamarine mediumblue mediumorchid mediumpurple mediumseagreen mediumslateblue
mediumspringgreen mediumturquoise mediumvioletred midnightblue mintcream mistyrose moccasin navajowhite navy oldlace olive
olivedrab orange orangered orchid palegoldenrod palegreen paleturquoise palevioletred papayawhip peachpuff peru pink plum
powderblue purple red rosybrown royalblue saddlebrown salmon sandybrown seagreen seashell sienna silver skyblue slateblue
slategray slategrey snow springgreen steelblue tan teal thistle tomato turquoise violet wheat white whitesmoke yellow
yellowgreen"""
CSS3_NAMES = frozenset(CSS3_KEYWORDS.split())
FOIL_COLOURS = ("blue", "black", "red", "pink", "yellow", "grey", "orange", "white", "green", "brown")  # create_foil's `colors`


@dataclasses.dataclass(frozen=True)
class Options:
    seed: int = option(0, "the seed of the foil colours' draws (the release draws them unseeded)")


@register
class ColorFoil(Benchmark):
    name = "colorfoil"
    task = "image_caption_selection"
    Options = Options
    kind = "attribute"  # the foil names other colours
    layout = ("ColorFoil: built from COCO's captions_val2017.json in DATA_ROOT/coco/ (`compclip data download coco_captions`) "
              "with the val2017 images in DATA_ROOT/coco/val2017/ (`compclip data download coco_val2017`)")

    def file(self, root: Path) -> Path:
        return root / "coco" / "captions_val2017.json"

    def lacks(self, root, splits):
        return self.missing_files(root, [self.file(root)])

    def examples(self, root: Path, seed: int, malformed: Malformed) -> list[dict[str, Any]]:
        """The notebook's benchmark: per image, its first caption naming a colour and that caption's foil (drawn from one
        generator seeded with `seed`), with the image's COCO id as `id`; a record not of COCO's format is skipped and
        named in `malformed`."""
        file = self.file(root)
        coco = read_json(file)
        if not isinstance(coco, dict) or not all(isinstance(coco.get(k), list) for k in ("images", "annotations")):
            raise DataError(f"{file}: not COCO's captions file (an object with lists `images` and `annotations`)")
        captions: dict[Any, list[str]] = {}
        for k, annotation in enumerate(coco["annotations"]):
            why = annotation_problem(annotation)
            if why:
                malformed.skip(f"{file} annotations", k, why)
                continue
            captions.setdefault(annotation["image_id"], []).append(annotation["caption"])
        rng, examples = random.Random(seed), []
        for k, image in enumerate(coco["images"]):
            why = image_problem(image)
            if why:
                malformed.skip(f"{file} images", k, why)
                continue
            caption = next((c for c in captions.get(image["id"], ()) if any(w in CSS3_NAMES for w in c.split(" "))), None)
            if caption is not None:
                examples.append({"id": image["id"], "image": coco_image(root, url_name(image["coco_url"])),
                                 "texts": [caption, foil_of(caption, rng)]})
        return examples

    def images(self, root):
        return list(dict.fromkeys(e["image"] for e in self.examples(root, Options().seed, Malformed())))

    def run(self, scorer, root, ties, splits=(), options=None):
        options = options or Options()
        missing, malformed = Missing.of(scorer), Malformed()
        kept = [e for e in self.examples(root, options.seed, malformed) if missing.keep([e["image"]])]
        images, texts = [e["image"] for e in kept], [e["texts"] for e in kept]
        scores = torch.stack([scorer.pairs(images, [t[k] for t in texts]) for k in (0, 1)], dim=1) if kept else torch.zeros(0, 2)
        correct = protocols.pair_accuracy(scores[:, 0], scores[:, 1], ties)
        metrics = {"acc": rate(correct), "text_acc": rate(correct), "n": len(kept), "seed": options.seed}
        items = choice_rows("", [e["id"] for e in kept], images, texts, scores, correct)
        return Result(metrics, missing, malformed.named(), items)


def foil_of(caption: str, rng: random.Random) -> str:
    """`create_foil`: each CSS3 colour word of the caption, in order, replaced everywhere by a colour drawn from
    `FOIL_COLOURS` (the one before it in the list where the draw is the word itself)."""
    for word in caption.split(" "):
        if word in CSS3_NAMES:
            drawn = rng.randint(0, 9)
            caption = caption.replace(word, FOIL_COLOURS[drawn - 1] if FOIL_COLOURS[drawn] == word else FOIL_COLOURS[drawn])
    return caption


def url_name(url: str) -> str:
    """The file an image's `coco_url` names (the notebook fetches the link; CLIP_benchmark reads its base name in val2017/)."""
    return PurePosixPath(urlparse(url).path).name


def image_problem(image) -> str | None:
    """Why an entry of `images` is not `{id, coco_url, ...}` with a link to a file, or None."""
    if not isinstance(image, dict):
        return f"a {type(image).__name__}, not an image object"
    if "id" not in image or isinstance(image["id"], (dict, list)):
        return f"id is {image['id']!r}, not an image id" if "id" in image else "no id"
    url = image.get("coco_url")
    if isinstance(url, str) and url_name(url):
        return None
    return f"coco_url is {url!r}, not an image's link" if "coco_url" in image else "no coco_url"


def annotation_problem(annotation) -> str | None:
    """Why an entry of `annotations` is not `{image_id, caption, ...}`, or None."""
    if not isinstance(annotation, dict):
        return f"a {type(annotation).__name__}, not a caption object"
    if "image_id" not in annotation or isinstance(annotation["image_id"], (dict, list)):
        return f"image_id is {annotation['image_id']!r}, not an image id" if "image_id" in annotation else "no image_id"
    return text_problem(annotation, "caption")
