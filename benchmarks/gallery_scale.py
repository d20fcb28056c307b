"""The error gallery (`compclip report --html`) at scale: build time and peak memory for two models' items.

    python benchmarks/gallery_scale.py --items 100000
    python benchmarks/gallery_scale.py --items 100000 --images 1000 --image-size 640   # photos of COCO's size

Two models, each with `--items` items (an image, its true caption, a false one with two words swapped, the options'
texts and scores), a third of them wrong, on real photos (`--images` of the shipped Flickr images, 200 px; with
`--image-size 640` resized to COCO's size, as a report over the official downloads shows them), in three shapes:
- `generic`: 10 splits named split0..split9, a benchmark that sorts its splits by no kind (the gallery tags the shown
  captions with spaCy);
- `sugarcrepe`: SugarCrepe's 7 splits (whose names give each card's kind);
- `suite`: every shipped benchmark's splits, each split's share of the items its official release's size (`SUITE`):
  a report over the whole harness. Retrieval's items are queries (no words tagged), zero-shot's are classes.
Each shape is built in a child process of its own, so that building the items does not count: `write_gallery`'s
wall time, and the growth of the process's peak resident memory (`resource.getrusage`) while it ran.
"""
from __future__ import annotations

import argparse
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLICKR = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k_1k"
COLOURS = ["red", "blue", "green", "yellow", "white", "black", "brown", "pink"]
NOUNS = ["dog", "cat", "couch", "table", "car", "horse", "shirt", "ball", "chair", "boat"]


GENERIC = tuple(("sugarcrepe", f"split{k}", 1) for k in range(10))
SUGARCREPE = tuple(("sugarcrepe", s, 1) for s in ("add_obj", "add_att", "replace_obj", "replace_att", "replace_rel", "swap_obj",
                                                   "swap_att"))
# (benchmark, split as its items name it, the split's items in its official release), a report over the harness
SUITE = (*((b, s, n) for b, s, n in (("sugarcrepe", "add_att", 692), ("sugarcrepe", "add_obj", 2062), ("sugarcrepe", "replace_att", 788),
                                     ("sugarcrepe", "replace_obj", 1652), ("sugarcrepe", "replace_rel", 1406),
                                     ("sugarcrepe", "swap_att", 666), ("sugarcrepe", "swap_obj", 246))),
         ("aro_vg_relation", "", 23937), ("aro_vg_attribution", "", 28748), ("aro_order", "coco_order", 25010),
         ("aro_order", "flickr30k_order", 1000), ("whatsup", "controlled_a", 406), ("whatsup", "controlled_b", 408),
         ("whatsup", "coco_one_obj", 2247), ("whatsup", "coco_two_obj", 1020), ("vl_checklist", "Attribute/color/vaw", 5000),
         ("vl_checklist", "Object/Size/vg_size/vg_obj_large", 5000), ("vl_checklist", "Relation/action/vg_action", 5000),
         ("winoground", "", 400), ("retrieval", "mscoco_captions", 30014), ("zeroshot", "imagenet1k", 50000))
SHAPES = {"generic": GENERIC, "sugarcrepe": SUGARCREPE, "suite": SUITE}


def photos(count: int, size: int, scratch: Path) -> list[str]:
    """`count` of the shipped photos (200 px on their long side), or with `size` each one resized to `size` px on its long
    side and saved as a JPEG of quality 90 in `scratch` (640: COCO's images, whose thumbnails cost more to make)."""
    from PIL import Image

    shipped = sorted((FLICKR / "images").iterdir())[:count]
    if not size:
        return [str(p) for p in shipped]
    scratch.mkdir(parents=True, exist_ok=True)
    made = []
    for p in shipped:
        out = scratch / f"{size}-{p.name}"
        if not out.is_file():
            with Image.open(p) as img:
                img = img.convert("RGB")
                scale = size / max(img.size)
                img.resize((round(img.width * scale), round(img.height * scale)), Image.Resampling.BICUBIC).save(out, quality=90)
        made.append(str(out))
    return made


def items(n: int, splits: tuple[tuple[str, str, int], ...], images: list[str], seed: int = 0):
    """`n` items a model, each split's share its weight's, their images drawn in turn from `images`."""
    import pandas as pd

    rng = random.Random(seed)
    total = sum(w for _, _, w in splits)
    parts = [(bench, split, max(1, round(n * w / total))) for bench, split, w in splits]
    rows = []
    for model in ("base", "tuned"):
        i = 0
        for bench, split, count in parts:
            for _ in range(count):
                a, b = rng.sample(COLOURS, 2)
                x, y = rng.sample(NOUNS, 2)
                true, false = f"a {a} {x} next to a {b} {y}", f"a {b} {x} next to a {a} {y}"
                st, sf = rng.random(), rng.random()
                row = {"model": model, "benchmark": bench, "split": split, "item": str(i), "image": images[i % len(images)],
                       "true": true, "false": false, "score_true": st, "score_false": sf,
                       "correct": st > sf if rng.random() < 0.5 else (i % 3 != 0), "tie": False, "texts": [true, false], "scores": [st, sf]}
                if bench == "retrieval":  # a caption's query: the image it retrieved instead of its own
                    row |= {"direction": "text→image", "image_2": images[(i + 1) % len(images)], "texts": None, "scores": None}
                elif bench == "zeroshot":  # a class item: its true class and the one scored highest
                    row |= {"true": x, "false": y, "texts": None, "scores": None}
                rows.append(row)
                i += 1
    return pd.DataFrame(rows)


def child(n: int, shape: str, images: list[str]) -> None:
    from compclip.eval.gallery import write_gallery

    frame = items(n, SHAPES[shape], images)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        page = write_gallery(frame, Path(tmp) / "gallery.html")
        size = page.stat().st_size
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"| {len(frame):,} | {shape} | {seconds:.1f} | {peak / 1024:.0f} | {(peak - before) / 1024:.0f} | {size / 1e6:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=100_000, help="items per model")
    parser.add_argument("--images", type=int, default=200, help="distinct photos the items show (at most the 1,000 shipped)")
    parser.add_argument("--image-size", type=int, default=0, help="each photo resized to this many px on its long side (0: as "
                                                                    "shipped, 200)")
    parser.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()) / "compclip-gallery-photos",
                        help="where resized photos are kept between runs")
    parser.add_argument("--child", choices=tuple(SHAPES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    images = photos(args.images, args.image_size, args.scratch)
    if args.child:
        child(args.items, args.child, images)
        return
    print("| items (two models) | shape | build s | peak RSS MiB | growth while building MiB | page MB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for shape in SHAPES:
        subprocess.run([sys.executable, __file__, "--child", shape, "--items", str(args.items), "--images", str(args.images),
                        "--image-size", str(args.image_size), "--scratch", str(args.scratch)], check=True)


if __name__ == "__main__":
    main()
