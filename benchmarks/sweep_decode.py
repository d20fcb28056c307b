"""`compclip eval --model a,b,c`, each image decoded once for three models of one preprocessing, against the same three
models evaluated one at a time, each its own `compclip eval`: the wall time of each way, and their ratio.

Retrieval on the shipped Flickr8k photos (1,000 images, 5,000 captions), each resized to `--image-size` px on its long
side (COCO's 640 by default, the size of the official benchmarks' images; 0: the shipped 200 px thumbnails) and saved as
a JPEG of quality 90. The three models are checkpoints of one architecture with different random weights (init seeds 0,
1 and 2: the same preprocessing, other scores). Each command runs in a process of its own, as a user runs it; each
model's per-item scores are checked equal both ways, and the sweep's log says how many images each model decoded.
Run: .venv/bin/python benchmarks/sweep_decode.py [--model compclip-tiny-clip] [--device cpu] [--workers 2]
     [--image-size 640] [--work /tmp/sweep-decode]
"""
from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

SHARED = Path(os.environ.get("COMPCLIP_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "data"


def dataset(root: Path, size: int) -> None:
    """DATA_ROOT/retrieval/flickr8k/: the shipped captions.csv, its photos at `size` px on the long side (0: as shipped)."""
    from PIL import Image

    folder = root / "retrieval" / "flickr8k"
    if (folder / "captions.csv").is_file():
        return
    (folder / "images").mkdir(parents=True)
    shipped = SHARED / "flickr8k_1k"
    with open(shipped / "captions.csv", newline="", encoding="utf-8") as f:
        names = sorted({row["image"] for row in csv.DictReader(f)})
    for name in names:
        if not size:
            shutil.copy(shipped / "images" / name, folder / "images" / name)
            continue
        with Image.open(shipped / "images" / name) as img:
            img = img.convert("RGB")
            scale = size / max(img.size)
            img.resize((round(img.width * scale), round(img.height * scale)), Image.Resampling.BICUBIC).save(
                folder / "images" / name, quality=90)
    shutil.copy(shipped / "captions.csv", folder / "captions.csv")


def checkpoints(work: Path, model: str) -> list[str]:
    """Three checkpoint folders of `model`, initialised from seeds 0, 1 and 2."""
    from compclip.models import load_model
    from compclip.models.checkpoint import save_checkpoint

    folders = []
    for seed in range(3):
        folder = work / f"{model}-seed{seed}"
        if not folder.is_dir():
            save_checkpoint(load_model(model, init_seed=seed)[0], folder)
        folders.append(str(folder))
    return folders


def run(model: str, out: Path, root: Path, args) -> tuple[float, str]:
    """One `compclip eval` in its own process: its wall time and its log."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "compclip", "eval", "--model", model, "--benchmark", "retrieval", "--data-root", str(root),
           "--out", str(out), "--device", args.device, "--workers", str(args.workers), "--batch-size", str(args.batch_size)]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return seconds, done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="compclip-tiny-clip", help="the architecture of the three checkpoints")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=640)
    parser.add_argument("--work", type=Path, default=Path("/tmp/sweep-decode"))
    args = parser.parse_args()
    import pandas as pd

    from compclip.eval.sweep import folder_name

    root = args.work / f"data-{args.image_size}"
    dataset(root, args.image_size)
    models = checkpoints(args.work, args.model)
    alone = sum(run(m, args.work / "alone" / folder_name(m), root, args)[0] for m in models)
    swept, log = run(",".join(models), args.work / "sweep", root, args)
    for m in models:
        mine, theirs = (pd.read_parquet(args.work / way / folder_name(m) / "retrieval.items.parquet") for way in ("sweep", "alone"))
        assert mine.equals(theirs), f"{m}: the sweep's scores differ from its own run's"
    decoded = re.findall(r"decoded (\d+) images, took (\d+) more", log)
    print(f"{args.model}, {args.device}, {args.workers} workers, images {args.image_size or 'as shipped'} px, retrieval on "
          "1,000 Flickr8k photos and 5,000 captions")
    print(f"three models one at a time: {alone:8.2f} s")
    print(f"one sweep of the three:     {swept:8.2f} s   (decoded, taken per model: {decoded})")
    print(f"ratio (one at a time / sweep): {alone / swept:.2f}; each model's scores the same to the bit both ways")


if __name__ == "__main__":
    main()
