"""Pretraining throughput on the binding world: the decoded-array reader against the PNG reader it replaced.

    python benchmarks/world_throughput.py --steps 60

Generates the demo's world (64 px, 20,000 training scenes, cached under --root), writes its
training split a second time as the PNG files + captions.csv it used to be, then runs the demo's
base pretraining (SigLIP from scratch, the demo's model unless --model, batch 128, 2 DataLoader workers) for
--steps steps on each and prints images/s and the ratio. Each run includes building the model and
the final checkpoint, the same on both sides. A third figure is the model alone: the same steps
on one batch held in memory (no reader, no workers), the ceiling any reader can reach.
Before the runs it times the tokenizer on batches of training captions: open_clip's BPE against
compclip's tokenizer once its cache holds them (every epoch after the first); `--tokenizer-only`
stops there.
"""
from __future__ import annotations

import argparse
import csv
import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from compclip.demo import MODEL
from compclip.train import TrainConfig, train
from compclip.world import WorldConfig, generate


def png_copy(world: Path, out: Path) -> Path:
    """The training split as it was before: one PNG per scene and captions.csv."""
    if (out / "captions.csv").is_file():
        return out / "captions.csv"
    images = np.load(world / "train" / "images.npy", mmap_mode="r")
    (out / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for i, line in enumerate((world / "train" / "scenes.jsonl").read_text().splitlines()):
        Image.fromarray(images[i]).save(out / "images" / f"train_{i:06d}.png")
        rows.append((f"images/train_{i:06d}.png", json.loads(line)["caption"]))
    with open(out / "captions.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["image", "caption"])
        writer.writerows(rows)
    return out / "captions.csv"


def images_per_s(model: str, data: Path, out: Path, steps: int, batch: int, workers: int) -> float:
    shutil.rmtree(out, ignore_errors=True)
    cfg = TrainConfig(method="siglip", model=model, train_data=str(data), out=str(out), steps=steps, batch_size=batch, lr=1e-3,
                      warmup=10, optimizer="adamw", weight_decay=0.1, workers=workers, shuffle=0, save_every=10**9, keep=1)
    start = time.perf_counter()
    train(cfg)
    return steps * batch / (time.perf_counter() - start)


def model_only(model: str, data: Path, out: Path, steps: int, batch: int) -> float:
    from compclip.train.step import loss_step
    from compclip.train.trainer import Trainer

    shutil.rmtree(out, ignore_errors=True)
    trainer = Trainer(TrainConfig(method="siglip", model=model, train_data=str(data), out=str(out), steps=steps,
                                  batch_size=batch, lr=1e-3, optimizer="adamw", weight_decay=0.1, workers=0))
    held = next(trainer._batches())
    start = time.perf_counter()
    for _ in range(steps):
        trainer.optimizer.zero_grad(set_to_none=True)
        loss_step(trainer.module, trainer.method, [held], trainer.env, trainer._autocast, lambda loss: loss.backward())
        trainer.optimizer.step()
    return steps * batch / (time.perf_counter() - start)


def tokenizer_ms(world: Path, batch: int, batches: int = 40) -> dict[str, float]:
    """Milliseconds per batch of training captions: open_clip's tokenizer, and ours on a second pass (cached)."""
    import open_clip

    from compclip.models import load_model

    lines = (world / "train" / "scenes.jsonl").read_text().splitlines()[: batch * batches]
    captions = [json.loads(line)["caption"] for line in lines]
    chunks = [captions[i : i + batch] for i in range(0, len(captions), batch)]
    ours = load_model("compclip-tiny-siglip")[2]
    plain = open_clip.SimpleTokenizer(context_length=ours.context_length)
    for chunk in chunks:  # the first epoch fills the cache
        ours(chunk)
    times = {}
    for name, tokenize in (("open_clip", plain), ("cached", ours)):
        start = time.perf_counter()
        for chunk in chunks:
            tokenize(chunk)
        times[name] = 1000 * (time.perf_counter() - start) / len(chunks)
    assert all(torch.equal(plain(c), ours(c)) for c in chunks[:3])
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", default=MODEL, help="the model pretrained from scratch (default: the demo's)")
    parser.add_argument("--root", default="/tmp/compclip-world-throughput")
    parser.add_argument("--tokenizer-only", action="store_true")
    args = parser.parse_args()
    root = Path(args.root)
    world = generate(root / "world", WorldConfig(seed=0, n_train=20_000, n_test=500, size=64), workers=2)
    ms = tokenizer_ms(world, args.batch)
    print(json.dumps({"tokenizer_ms_per_batch": {k: round(v, 2) for k, v in ms.items()},
                      "speedup": round(ms["open_clip"] / ms["cached"], 1)}))
    if args.tokenizer_only:
        return
    pngs = png_copy(world, root / "png")
    rates = {
        "png_csv": images_per_s(args.model, pngs, root / "run-png", args.steps, args.batch, args.workers),
        "npy_array": images_per_s(args.model, world / "train" / "images.npy", root / "run-npy", args.steps, args.batch, args.workers),
        "model_only": model_only(args.model, world / "train" / "images.npy", root / "run-model", args.steps, args.batch),
    }
    print(json.dumps({**{k: round(v, 1) for k, v in rates.items()}, "ratio": round(rates["npy_array"] / rates["png_csv"], 2),
                      "model": args.model, "steps": args.steps, "batch": args.batch, "workers": args.workers}))


if __name__ == "__main__":
    main()
