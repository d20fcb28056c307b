"""Does C2LIP's mechanism work in the binding world? Concept retrieval and where the concept's attention lands.

For each trained model of a demo (and the ablation's other seeds of the same methods, where they exist), on the
seen and unseen test scenes:
- `concept AP`: each concept the scenes hold ("a red square") ranks every test image by cosine with its text
  embedding; the average precision of the images that hold it (mean over concepts). This is what L_npc trains: a
  noun phrase nearer its own image.
- `bound AP`: the same ranking, among the images that hold it and the images that hold its colour and its shape on
  two other objects ("a red circle and a blue square"): only binding separates them, so 50 %-ish is a bag of words.
- `attention on object`: the share of the concept's cross-attention (L_xac's, as the model was trained: cosine at
  temperature 1, or scaled by √D) on the visual tokens whose patch centre lies inside the named object's disk, over the
  share of the image those patches cover (1: no better than uniform); `argmax on object`: how often the most
  attended patch is on the named object (the other objects are as near and as big, so chance is low but not 0).

Run: .venv/bin/python research/c2lip_mechanism.py DEMO_OUT [--seeds 0,1,2] [--scenes 400]
"""
from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
from PIL import Image

from compclip.models import load_model
from compclip.models.checkpoint import RunFolder
from compclip.models.tokens import visual_token_embeddings
from compclip.stats import fmt, interval

METHODS = ("base", "siglip", "c2lip", "attswap")


def checkpoint(demo: Path, method: str, seed: int) -> Path | None:
    """The final checkpoint of `method` fine-tuned with `seed`: the demo's own (its first seed), else the ablation's."""
    first = json.loads((demo / "report" / "seeds.json").read_text())["seeds"][0] if (demo / "report" / "seeds.json").is_file() else 0
    places = [demo / "train" / method] if seed == first or method == "base" else []
    places += [demo / "train" / f"{method}-s{seed}", demo / "ablation" / method / f"seed{seed}"]
    newest = (RunFolder(place).latest() for place in places)
    return next((checkpoint for checkpoint in newest if checkpoint), None)


def average_precision(scores: torch.Tensor, positive: torch.Tensor) -> float:
    order = torch.argsort(scores, descending=True)
    hits = positive[order].float()
    precision = hits.cumsum(0) / torch.arange(1, len(hits) + 1)
    return float((precision * hits).sum() / hits.sum())


@torch.no_grad()
def measure(ckpt: Path, split_dir: Path, scenes: list[dict]) -> dict[str, float]:
    model, preprocess, tokenizer = load_model(str(ckpt))
    images = torch.stack([preprocess(Image.open(split_dir / "coco" / "val2017" / f"{split_dir.name}_{s['index']:06d}.png").convert("RGB"))
                          for s in scenes])
    pooled, tokens = [], []
    for chunk in images.split(128):
        p, t = visual_token_embeddings(model, chunk)
        pooled.append(F.normalize(p, dim=-1))
        tokens.append(t)
    pooled, tokens = torch.cat(pooled), torch.cat(tokens)
    grid = math.isqrt(tokens.shape[1])
    centres = (torch.arange(grid) + 0.5) / grid
    cy, cx = torch.meshgrid(centres, centres, indexing="ij")
    held = [{(o["color"], o["shape"]) for o in s["scene"]["objects"]} for s in scenes]
    concepts = sorted(set().union(*held))
    texts = F.normalize(model.encode_text(tokenizer([f"a {c} {s}" for c, s in concepts])), dim=-1)
    text_of = dict(zip(concepts, texts, strict=True))
    scores = pooled @ texts.T
    ap, bound, bound_chance = [], [], []
    for k, (colour, shape) in enumerate(concepts):
        positive = torch.tensor([(colour, shape) in h for h in held])
        if positive.all() or not positive.any():
            continue
        ap.append(average_precision(scores[:, k], positive))
        unbound = torch.tensor([(colour, shape) not in h and any(c == colour for c, _ in h) and any(x == shape for _, x in h)
                                for h in held])
        if unbound.any():
            keep = positive | unbound
            bound.append(average_precision(scores[keep, k], positive[keep]))
            bound_chance.append(float(positive[keep].float().mean()))  # a random ranking's AP, about
    cosine_ratio, scaled_ratio, argmax, areas = [], [], [], []
    normed = F.normalize(tokens, dim=-1)
    for i, s in enumerate(scenes):
        for o in s["scene"]["objects"]:
            r = {"small": 0.11, "large": 0.17}[o["size"]]
            inside = ((cx - o["x"]) ** 2 + (cy - o["y"]) ** 2 <= r ** 2).flatten()
            if not inside.any():
                continue
            area = inside.float().mean()
            areas.append(float(area))
            c = text_of[(o["color"], o["shape"])]
            cosine = (normed[i] @ c).softmax(-1)  # L_xac's attention as trained (xac_attention=cosine, temperature 1)
            scaled = (tokens[i] @ c / math.sqrt(tokens.shape[-1])).softmax(-1)
            cosine_ratio.append(float(cosine[inside].sum() / area))
            scaled_ratio.append(float(scaled[inside].sum() / area))
            argmax.append(bool(inside[int((tokens[i] @ c).argmax())]))
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    return {"concept AP": 100 * mean(ap), "bound AP": 100 * mean(bound), "bound AP by chance": 100 * mean(bound_chance),
            "attention on object (cosine)": mean(cosine_ratio), "attention on object (scaled)": mean(scaled_ratio),
            "argmax on object": 100 * mean(argmax), "argmax by chance": 100 * mean(areas)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("demo", type=Path)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--scenes", type=int, default=400, help="test scenes per split")
    parser.add_argument("--methods", default=",".join(METHODS))
    args = parser.parse_args()
    results: dict[tuple[str, str], list[dict[str, float]]] = defaultdict(list)
    for split in ("seen", "unseen"):
        split_dir = args.demo / "world" / f"test_{split}"
        scenes = [json.loads(line) for line in (split_dir / "scenes.jsonl").read_text().splitlines()[: args.scenes]]
        for method in args.methods.split(","):
            for seed in [int(s) for s in args.seeds.split(",")] if method != "base" else [0]:
                ckpt = checkpoint(args.demo, method, seed)
                if ckpt is not None:
                    results[(method, split)].append(measure(ckpt, split_dir, scenes))
    columns = list(next(iter(results.values()))[0])
    print(f"mean ± 95 % interval over fine-tuning seeds ({args.seeds}; the base has one); {args.scenes} scenes a split")
    print("| model | split | seeds | " + " | ".join(columns) + " |")
    print("|" + " --- |" * (3 + len(columns)))
    for (method, split), rows in results.items():
        digits = {c: 2 if c.startswith("attention") else 1 for c in columns}
        cells = [fmt(*interval([r[c] for r in rows]), digits[c]) for c in columns]
        print(f"| {method} | {split} | {len(rows)} | " + " | ".join(cells) + " |", flush=True)
    out = args.demo / "mechanism.json"
    out.write_text(json.dumps({f"{m}/{s}": rows for (m, s), rows in results.items()}, indent=1))


if __name__ == "__main__":
    main()
