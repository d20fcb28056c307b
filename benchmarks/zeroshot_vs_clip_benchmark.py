"""compclip's zero-shot classification of a wds set against CLIP_benchmark 1.6.2's on the same machine, in one run.

The set is written as `clip_benchmark_export_wds` writes one (webdataset's ShardWriter, test/%d.tar, keys s%07d,
nshards.txt, classnames.txt, zeroshot_classification_templates.txt): generated stand-in images, lossless WebP. The model
is an open_clip architecture (ViT-B-32 by default) with random weights (fixed seed), fp32 on the CPU.

CLIP_benchmark is timed as its `eval` scores a wds set (clip_benchmark/cli.py: `build_wds_dataset`, a DataLoader over
`dataset.batched(batch_size)`, then metrics/zeroshot_classification.py's `zero_shot_classifier` and
`run_classification`), in this process: its `evaluate` then casts a one-element array with float(), which numpy 2.x
refuses, so its figures are computed here from its logits. compclip is timed as `compclip eval --benchmark zeroshot`
runs (`compclip.eval.evaluate`), in this process too; each side loads the model before its clock starts.
Target: compclip at most 0.9x CLIP_benchmark's time. The script asserts equal acc1, acc5 and mean_per_class_recall.

Needs CLIP_benchmark (the `bench` extra, or COMPCLIP_BENCH_PATH naming the folder it is installed in).
Run: .venv/bin/python benchmarks/zeroshot_vs_clip_benchmark.py [--images 500] [--model ViT-B-32]
"""
import argparse
import io
import json
import os
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


def clip_benchmark_run(model_name: str, folder: Path, batch_size: int, workers: int) -> tuple[dict, float]:
    import open_clip
    from clip_benchmark.datasets.builder import build_wds_dataset
    from clip_benchmark.metrics.zeroshot_classification import run_classification, zero_shot_classifier
    from sklearn.metrics import balanced_accuracy_score

    torch.manual_seed(0)
    model, _, transform = open_clip.create_model_and_transforms(model_name)
    tokenizer = open_clip.get_tokenizer(model_name)
    model.eval()
    start = time.perf_counter()
    dataset = build_wds_dataset("stand-in", transform, data_dir=str(folder))
    loader = torch.utils.data.DataLoader(dataset.batched(batch_size), batch_size=None, shuffle=False, num_workers=workers)
    classifier = zero_shot_classifier(model, tokenizer, dataset.classes, dataset.templates, "cpu", amp=False)
    logits, target = run_classification(model, classifier, loader, "cpu", amp=False)
    seconds = time.perf_counter() - start
    top = logits.topk(5, dim=1).indices
    return {"acc1": (top[:, 0] == target).float().mean().item(), "acc5": (top == target[:, None]).any(1).float().mean().item(),
            "mean_per_class_recall": balanced_accuracy_score(target, logits.argmax(1))}, seconds


def compclip_run(model_name: str, root: Path, out: Path, batch_size: int, workers: int) -> tuple[dict, float]:
    from compclip.eval import EvalConfig, evaluate
    from compclip.models import load_model

    load_model(model_name)  # open_clip's import and the architecture's first build, before the clock as on the other side
    start = time.perf_counter()
    evaluate(EvalConfig(model=model_name, benchmark="zeroshot", out=str(out), data_root=str(root), workers=workers,
                        batch_size=batch_size, device="cpu", precision="fp32", ties="clip_benchmark"))
    seconds = time.perf_counter() - start
    return json.loads((out / "zeroshot.json").read_text())["metrics"]["stand-in"], seconds


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
    print(f"CLIP_benchmark {their_seconds:8.1f} s")
    print(f"compclip       {our_seconds:8.1f} s")
    print(f"ratio          {our_seconds / their_seconds:8.2f}x  (target <= 0.9x)")
    print(f"load average   {load_before:8.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
