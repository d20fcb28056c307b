"""Where binding is lost: each tower probed apart, and the joint score on the training captions' own swaps.

    python research/binding_probe.py --demo runs/demo CHECKPOINT [CHECKPOINT ...]

For each checkpoint, on the first --scenes training scenes of the demo's world with two objects or more:
- `swap_train`: how often image·caption beats image·(the caption with two objects' colours exchanged at every
  mention, `attswap`'s negative): the joint score on the kind of negative the positive control trains on;
  `text_cos`: the mean cosine between a caption's text embedding and its swap's;
- `probe_image`, `probe_text`: a linear probe (softmax regression, 80/20 split, one per shape) that reads the
  colour of the object of a given shape from the image embedding or from the caption's text embedding; against
  `present_colours`, the accuracy of guessing among the colours in the scene, which is what a tower that knows
  which colours and shapes are there, but not which goes with which, can reach (LABCLIP's advice: probe each
  tower as well as the joint score).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from compclip.concepts import ConceptStore
from compclip.methods.negclip import swap_negatives
from compclip.models import load_model
from compclip.world.scene import COLORS, SHAPES


def embeddings(model, preprocess, tokenizer, pixels, scenes, texts) -> tuple[torch.Tensor, torch.Tensor]:
    images, captions = [], []
    with torch.no_grad():
        for i in range(0, len(scenes), 256):
            chunk = scenes[i : i + 256]
            batch = torch.stack([preprocess(Image.fromarray(np.asarray(pixels[s["index"]]))) for s in chunk])
            images.append(F.normalize(model.encode_image(batch), dim=-1))
            captions.append(F.normalize(model.encode_text(tokenizer(texts[i : i + 256])), dim=-1))
    return torch.cat(images), torch.cat(captions)


def probe(features: torch.Tensor, scenes: list[dict]) -> tuple[float, float]:
    """Mean over shapes of the held-out accuracy of reading that shape's colour, and of guessing among present colours."""
    colours = list(COLORS)
    accuracy, guess = [], []
    for shape in SHAPES:
        rows = [k for k, s in enumerate(scenes) if any(o["shape"] == shape for o in s["scene"]["objects"])]
        if len(rows) < 50:
            continue
        target = torch.tensor([colours.index(next(o["color"] for o in scenes[k]["scene"]["objects"] if o["shape"] == shape))
                               for k in rows])
        x, cut = features[rows], int(0.8 * len(rows))
        torch.manual_seed(0)
        linear = torch.nn.Linear(x.shape[1], len(colours))
        optimizer = torch.optim.Adam(linear.parameters(), lr=0.05)
        for _ in range(300):
            optimizer.zero_grad()
            F.cross_entropy(linear(x[:cut] * 10), target[:cut]).backward()
            optimizer.step()
        with torch.no_grad():
            accuracy.append((linear(x[cut:] * 10).argmax(1) == target[cut:]).float().mean().item())
        guess.append(float(np.mean([1 / len({o["color"] for o in scenes[k]["scene"]["objects"]}) for k in rows[cut:]])))
    return float(np.mean(accuracy)), float(np.mean(guess))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--demo", default="runs/demo", help="a demo folder: its world and concept store")
    parser.add_argument("--scenes", type=int, default=8000)
    args = parser.parse_args()
    demo = Path(args.demo)
    with open(demo / "world" / "train" / "scenes.jsonl", encoding="utf-8") as f:
        scenes = [json.loads(line) for _, line in zip(range(args.scenes), f, strict=False)]
    scenes = [s for s in scenes if len(s["scene"]["objects"]) >= 2]
    records = ConceptStore(demo / "concepts").get_many([s["caption"] for s in scenes])
    swaps = [swap_negatives(s["caption"], r, 1, 0, ("attribute",), everywhere=True) for s, r in zip(scenes, records, strict=True)]
    swapped = [k for k, made in enumerate(swaps) if made]
    pixels = np.load(demo / "world" / "train" / "images.npy", mmap_mode="r")
    for checkpoint in args.checkpoints:
        model, preprocess, tokenizer = load_model(checkpoint)
        model.eval()
        images, texts = embeddings(model, preprocess, tokenizer, pixels, scenes, [s["caption"] for s in scenes])
        _, negatives = embeddings(model, preprocess, tokenizer, pixels, [scenes[k] for k in swapped], [swaps[k][0] for k in swapped])
        wins = ((images[swapped] * texts[swapped]).sum(-1) > (images[swapped] * negatives).sum(-1)).float().mean().item()
        probe_image, guess = probe(images, scenes)
        probe_text, _ = probe(texts, scenes)
        print(json.dumps({"checkpoint": checkpoint, "scenes": len(scenes), "swap_train": round(100 * wins, 1),
                          "text_cos": round((texts[swapped] * negatives).sum(-1).mean().item(), 4),
                          "probe_image": round(100 * probe_image, 1), "probe_text": round(100 * probe_text, 1),
                          "present_colours": round(100 * guess, 1)}))


if __name__ == "__main__":
    main()
