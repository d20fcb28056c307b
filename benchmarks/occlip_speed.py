"""OC-CLIP's cost: a training step against a CLIP step on the same backbone and batch, and scoring throughput.

    python benchmarks/occlip_speed.py [--model compclip-tiny-siglip-conv] [--batch 128] [--train-only] [--world KEY=VALUE ...]

Data: the demo's binding world (`compclip.demo.world_config`, 1,000 test scenes, generated under --root; `--world` changes
a setting as `compclip demo --world` does). Training: one
collated batch of training scenes held in memory, then --steps optimizer steps of each method
(forward, backward, AdamW), median step time; then OC-CLIP's step taken apart (`occlip_parts`). Scoring: `GraphScorer` (OC-CLIP) and
`DualEncoderScorer` (the same model as CLIP) on SugarCrepe-style pairs (each test scene with its
caption) and on a 1,000 × 5,000 retrieval matrix (every scene against 5,000 captions); images
and texts are encoded first and timed apart, so the figures are the scoring itself.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from compclip.concepts import extract
from compclip.demo import MODEL, world_config, world_options
from compclip.eval import DualEncoderScorer
from compclip.methods import build_method
from compclip.methods.occlip import GraphScorer
from compclip.models import load_model, train_preprocess
from compclip.models.tokens import encode_short_texts, visual_token_embeddings
from compclip.train import DistEnv, loss_step
from compclip.train.trainer import _TrainModule
from compclip.world import generate


def step_seconds(method_name: str, model_name: str, images: torch.Tensor, captions: list[str], records: dict, steps: int) -> float:
    torch.manual_seed(0)
    model, _, tokenizer = load_model(model_name)
    method = build_method(method_name, concepts=records).bind(model)
    batch = method.collate([{"image": im, "caption": c} for im, c in zip(images, captions, strict=True)], tokenizer)
    module = _TrainModule(model.train(), method)
    optimizer = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=1e-4)
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_step(module, method, [batch], DistEnv())
        optimizer.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def median_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat + 1):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def occlip_parts(model_name: str, images: torch.Tensor, captions: list[str], records: dict, repeat: int) -> dict[str, float]:
    """Where an OC-CLIP step goes, each part forward and backward alone: the image tower to its patch tokens, the
    text tower over the graphs' node and relation texts (never over the captions: `reads_captions`), the binding
    module's loss (every image against every graph, from the towers' outputs held fixed), and the optimizer's update."""
    torch.manual_seed(0)
    model, _, tokenizer = load_model(model_name)
    method = build_method("occlip", concepts=records).bind(model)
    batch = method.collate([{"image": im, "caption": c} for im, c in zip(images, captions, strict=True)], tokenizer)
    model.train()
    params = [p for p in [*model.parameters(), *method.parameters()] if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    for p in params:
        p.grad = torch.zeros_like(p)
    with torch.no_grad():
        fixed = method.outputs(model, batch)

    def backward_of(fn):
        return lambda: fn().float().sum().backward()

    def module_loss():
        out = {k: v.detach().requires_grad_(v.is_floating_point()) if torch.is_tensor(v) else v for k, v in fixed.items()}
        return sum(method(out).values())

    parts = {
        "image_tower": backward_of(lambda: visual_token_embeddings(model, batch["image"], -1)[1]),
        "text_tower_graph_texts": backward_of(lambda: encode_short_texts(model, batch["graph_text"])),
        "binding_module_loss": backward_of(module_loss),
        "optimizer_update": optimizer.step,
    }
    seconds = {name: median_seconds(fn, repeat) for name, fn in parts.items()}
    seconds["graph_texts"] = batch["graph_text"].shape[0]
    return seconds


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=MODEL, help="the demo's model by default")
    parser.add_argument("--train-only", action="store_true", help="time the training step and its parts, not the scorers")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--root", default="/tmp/compclip-occlip-speed")
    parser.add_argument("--world", action="append", default=[], metavar="KEY=VALUE", help="a world setting other than the demo's")
    args = parser.parse_args()
    settings = world_options(dict(kv.split("=", 1) for kv in args.world))
    world = generate(Path(args.root) / "world", world_config(settings, 0, args.batch, 1000), workers=2)
    scenes = [json.loads(line) for line in (world / "train" / "scenes.jsonl").read_text().splitlines()]
    captions = [s["caption"] for s in scenes]
    records = {r["caption"]: r for r in extract(captions, "graph")}
    model, preprocess, tokenizer = load_model(args.model)
    view = train_preprocess(model)
    pixels = np.load(world / "train" / "images.npy")
    images = torch.stack([view(Image.fromarray(p)) for p in pixels])
    steps = {m: step_seconds(m, args.model, images, captions, records, args.steps) for m in ("siglip", "clip", "occlip")}
    print(json.dumps({"step_s": {k: round(v, 4) for k, v in steps.items()},
                      "occlip_over_siglip": round(steps["occlip"] / steps["siglip"], 2),
                      "occlip_over_clip": round(steps["occlip"] / steps["clip"], 2)}))
    parts = occlip_parts(args.model, images, captions, records, args.steps)
    print(json.dumps({"occlip_parts_s": {k: round(v, 4) for k, v in parts.items()}}))
    if args.train_only:
        return

    test = [json.loads(line) for line in (world / "test_seen" / "scenes.jsonl").read_text().splitlines()]
    files = [world / "test_seen" / "coco" / "val2017" / f"test_seen_{r['index']:06d}.png" for r in test]
    texts = [r["caption"] for r in test]
    pool = (texts * 5)[:5000]
    pool = [f"{t} ({k // len(texts)})" if k >= len(texts) else t for k, t in enumerate(pool)]  # 5,000 distinct captions
    method = build_method("occlip", concepts={}).bind(model)
    scorers = {"occlip": method.eval().scorer(model.eval(), preprocess, tokenizer, workers=2),
               "dual_encoder": DualEncoderScorer(model, preprocess, tokenizer, workers=2)}
    for name, scorer in scorers.items():
        graph = isinstance(scorer, GraphScorer)
        encode_images, _ = timed(partial(scorer.tokens if graph else scorer.images, files))
        encode_texts, _ = timed(partial(scorer.graphs if graph else scorer.texts, pool))
        pairs_s, _ = timed(partial(scorer.pairs, files, texts))
        matrix_s, scores = timed(partial(scorer.matrix, files, pool))
        print(json.dumps({"scorer": name, "encode_images_s": round(encode_images, 2), "encode_texts_s": round(encode_texts, 2),
                          "pairs_per_s": round(len(files) / pairs_s), "matrix_shape": list(scores.shape),
                          "matrix_s": round(matrix_s, 2), "matrix_pairs_per_s": round(scores.numel() / matrix_s)}))


if __name__ == "__main__":
    main()
