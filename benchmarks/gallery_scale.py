"""The error gallery (`compclip report --html`) at scale: build time and peak memory for two models' items.

    python benchmarks/gallery_scale.py --items 100000

Two models, each with `--items` items (SugarCrepe-like: an image, its true caption, a swapped false one, the options'
texts and scores), a third of them wrong, on 200 real photos (the shipped Flickr images); once in 10 splits named
split0..split9 (a benchmark that sorts its splits by no kind: the gallery tags the shown captions with spaCy), once in
SugarCrepe's 7 splits (whose names give each card's kind). Each phase of
`write_gallery` is timed in this process; the peak resident memory is the process's (`resource.getrusage`), measured in
a child of its own so that building the items does not count.
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


GENERIC = tuple(f"split{k}" for k in range(10))
SUGARCREPE = ("add_obj", "add_att", "replace_obj", "replace_att", "replace_rel", "swap_obj", "swap_att")


def items(n: int, splits: tuple[str, ...], seed: int = 0):
    import pandas as pd

    rng = random.Random(seed)
    images = sorted(str(p) for p in (FLICKR / "images").iterdir())[:200]
    rows = []
    for model in ("base", "tuned"):
        for i in range(n):
            a, b = rng.sample(COLOURS, 2)
            x, y = rng.sample(NOUNS, 2)
            true, false = f"a {a} {x} next to a {b} {y}", f"a {b} {x} next to a {a} {y}"
            st, sf = rng.random(), rng.random()
            rows.append({"model": model, "benchmark": "sugarcrepe", "split": splits[i % len(splits)], "item": str(i),
                         "image": images[i % len(images)], "true": true, "false": false, "score_true": st, "score_false": sf,
                         "correct": st > sf if rng.random() < 0.5 else (i % 3 != 0), "tie": False, "texts": [true, false],
                         "scores": [st, sf]})
    return pd.DataFrame(rows)


def child(n: int, splits: str) -> None:
    from compclip.eval.gallery import write_gallery

    frame = items(n, SUGARCREPE if splits == "sugarcrepe" else GENERIC)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        page = write_gallery(frame, Path(tmp) / "gallery.html")
        size = page.stat().st_size
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"| {2 * n:,} | {splits} | {seconds:.1f} | {peak / 1024:.0f} | {(peak - before) / 1024:.0f} | {size / 1e6:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=100_000, help="items per model")
    parser.add_argument("--child", choices=("generic", "sugarcrepe"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.items, args.child)
        return
    print("| items (two models) | splits | build s | peak RSS MiB | growth while building MiB | page MB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for splits in ("generic", "sugarcrepe"):
        subprocess.run([sys.executable, __file__, "--child", splits, "--items", str(args.items)], check=True)


if __name__ == "__main__":
    main()
