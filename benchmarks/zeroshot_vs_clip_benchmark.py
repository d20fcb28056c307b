"""compclip's zero-shot classification of a wds set against CLIP_benchmark 1.6.2's on the same machine, in one run.

The set is written as `clip_benchmark_export_wds` writes one (webdataset's ShardWriter, test/%d.tar, keys s%07d,
nshards.txt, classnames.txt, zeroshot_classification_templates.txt): generated stand-in images, lossless WebP. The model
is an open_clip architecture (ViT-B-32 by default) with random weights (fixed seed), fp32 on the CPU.

CLIP_benchmark is timed as its `eval` scores a wds set (clip_benchmark/cli.py: `build_wds_dataset`, a DataLoader over
`dataset.batched(batch_size)`, then metrics/zeroshot_classification.py's `zero_shot_classifier` and
`run_classification`), in this process: its `evaluate` then casts a one-element array with float(), which numpy 2.x
refuses, so its figures are computed here from its logits. compclip is timed as `compclip eval --benchmark zeroshot`
scores a model once it is loaded: `compclip.evaluate` (`compclip.eval.run.evaluate_model`, the same scorer, benchmark,
records and items files) on the model `compclip.models.load_model` built, in this process too. Each side imports its
modules and builds its model before its clock starts, and stops it once its figures are computed (compclip's written).
Target: compclip at most 0.9x CLIP_benchmark's time. The script asserts equal acc1, acc5 and mean_per_class_recall.
Besides the wall-clock seconds it prints each side's CPU seconds (this process and its DataLoader workers): on cores
other work shares, those move less than the wall clock does.

Needs CLIP_benchmark (the `bench` extra, or COMPCLIP_BENCH_PATH naming the folder it is installed in).
Run: .venv/bin/python benchmarks/zeroshot_vs_clip_benchmark.py [--images 500] [--model ViT-B-32]
"""
import argparse
import io
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

CLASSES = ["red", "green", "blue", "yellow", "white", "black", "grey", "orange", "purple", "brown"]
TEMPLATES = ["a photo of a {c} thing.", "a blurry photo of a {c} thing.", "a {c} picture."]


def write_set(folder: Path, images: int, per_shard: int) -> None:
    """Stand-in images in clip_benchmark_export_wds's layout."""
    import webdataset

    (folder / "test").mkdir(parents=True)
    with webdataset.ShardWriter(str(folder / "test" / "%d.tar"), maxcount=per_shard, verbose=0) as sink:
        for k in range(images):
            rng = np.random.default_rng(k)
            pixels = np.clip(rng.integers(0, 255, 3) + rng.integers(-40, 40, (240, 320, 3)), 0, 255).astype(np.uint8)
            out = io.BytesIO()
            Image.fromarray(pixels).save(out, format="webp", lossless=True)
            sink.write({"__key__": f"s{k:07d}", "webp": out.getvalue(), "cls": k % len(CLASSES)})
    (folder / "test" / "nshards.txt").write_text(f"{-(-images // per_shard)}\n")
    (folder / "classnames.txt").write_text("\n".join(CLASSES) + "\n")
    (folder / "zeroshot_classification_templates.txt").write_text("\n".join(TEMPLATES) + "\n")


def clip_benchmark_run(model_name: str, folder: Path, batch_size: int, workers: int) -> tuple[dict, tuple[float, float]]:
    import open_clip
    from clip_benchmark.datasets.builder import build_wds_dataset
    from clip_benchmark.metrics.zeroshot_classification import run_classification, zero_shot_classifier
    from sklearn.metrics import balanced_accuracy_score

    torch.manual_seed(0)
    model, _, transform = open_clip.create_model_and_transforms(model_name)
    tokenizer = open_clip.get_tokenizer(model_name)
    model.eval()
    clock = Clock()
    dataset = build_wds_dataset("stand-in", transform, data_dir=str(folder))
    loader = torch.utils.data.DataLoader(dataset.batched(batch_size), batch_size=None, shuffle=False, num_workers=workers)
    classifier = zero_shot_classifier(model, tokenizer, dataset.classes, dataset.templates, "cpu", amp=False)
    logits, target = run_classification(model, classifier, loader, "cpu", amp=False)
    top = logits.topk(5, dim=1).indices
    figures = {"acc1": (top[:, 0] == target).float().mean().item(), "acc5": (top == target[:, None]).any(1).float().mean().item(),
               "mean_per_class_recall": balanced_accuracy_score(target, logits.argmax(1))}
    return figures, clock.stop()


def compclip_run(model_name: str, root: Path, out: Path, batch_size: int, workers: int) -> tuple[dict, tuple[float, float]]:
    import compclip
    from compclip.eval.base import REGISTRY
    from compclip.models import load_model

    len(REGISTRY)  # the benchmarks' modules imported, as build_wds_dataset's are on the other side before its clock
    torch.manual_seed(0)
    model, preprocess, tokenizer = load_model(model_name)
    clock = Clock()
    compclip.evaluate(model, preprocess, tokenizer, "zeroshot", root, out, name=model_name, device="cpu", workers=workers,
                      batch_size=batch_size, precision="fp32", ties="clip_benchmark")
    figures = json.loads((out / "zeroshot.json").read_text())["metrics"]["stand-in"]
    return figures, clock.stop()


class Clock:
    """Wall-clock and CPU seconds from its making: this process's and its reaped children's (the DataLoader workers)."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), self.cpu_seconds()

    @staticmethod
    def cpu_seconds() -> float:
        own, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime

    def stop(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, self.cpu_seconds() - self.cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--per-shard", type=int, default=200)
    parser.add_argument("--model", default="ViT-B-32")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if os.environ.get("COMPCLIP_BENCH_PATH"):
        sys.path.append(os.environ["COMPCLIP_BENCH_PATH"])
    load_before = os.getloadavg()[0]  # other processes on the same cores make both sides slower, unevenly: printed below
    with tempfile.TemporaryDirectory() as work:
        root = Path(work) / "data"
        write_set(root / "zeroshot" / "stand-in", args.images, args.per_shard)
        theirs, their_seconds = clip_benchmark_run(args.model, root / "zeroshot" / "stand-in", args.batch_size, args.workers)
        ours, our_seconds = compclip_run(args.model, root, Path(work) / "out", args.batch_size, args.workers)
    for key in ("acc1", "acc5", "mean_per_class_recall"):
        print(f"{key:22s} CLIP_benchmark {theirs[key]:.4f}  compclip {ours[key]:.4f}")
        assert abs(theirs[key] - ours[key]) < 1e-6, key
    print(f"{args.images} images, {args.model}, fp32 on the CPU, batch {args.batch_size}, {args.workers} workers")
    print(f"CLIP_benchmark {their_seconds[0]:8.1f} s  ({their_seconds[1]:.1f} CPU s)")
    print(f"compclip       {our_seconds[0]:8.1f} s  ({our_seconds[1]:.1f} CPU s)")
    wall, cpu = (ours_ / theirs_ for ours_, theirs_ in zip(our_seconds, their_seconds, strict=True))
    print(f"ratio          {wall:8.2f}x  (target <= 0.9x; of CPU seconds {cpu:.2f}x)")
    print(f"load average   {load_before:8.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
