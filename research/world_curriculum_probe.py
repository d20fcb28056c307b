"""Which pretraining order lets the binding world's base see shape? A contrastive curriculum probe.

    python research/world_curriculum_probe.py runs/demo/world --phase1 600 --phase1-captions shape \\
        --phase2 mixed --steps 1200

SigLIP pretraining from scratch in one process: `compclip-tiny-siglip-conv` (`--tower conv`) or
`compclip-tiny-siglip`, its linear patch embedding (`--tower patch`), open_clip's `SigLipLoss`, AdamW
1e-3, 100 warm-up steps and a cosine over `--steps`, batch 128, captions tokenised once. The first
`--phase1` steps show single-object scenes of the world's seen pairings with captions of one kind:
`shape` ("a star"), `colour` ("something red"), `colour-shape` ("a red star"), `one` (shape or colour,
alternating) or `mixed` (all three in turn). The remaining steps show the world's training scenes with
their long captions (`--phase2 world`) or the same single objects with captions of another kind. Every
`--eval-every` steps it prints zero-shot shape and colour on the world's seen split (its templates, the
mean of the normalised template embeddings per class: `compclip eval`'s protocol, on this probe's
pixels) and a linear probe of shape on frozen image features (2,000 fresh single objects of every
pairing to fit, 1,000 to test), which says whether the image tower sees shape when zero-shot does not.
"""
import argparse
import json
import math
import random
import time
from pathlib import Path

import numpy as np
import open_clip
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from compclip.models.bundled import CONFIG_DIR
from compclip.world import scene as world

CAPTIONS = {
    "shape": lambda i, color, shape: f"a {shape}",
    "colour": lambda i, color, shape: f"something {color}",
    "colour-shape": lambda i, color, shape: f"a {color} {shape}",
    "one": lambda i, color, shape: f"a {shape}" if i % 2 else f"something {color}",
    "mixed": lambda i, color, shape: (f"a {color} {shape}", f"a {shape}", f"something {color}")[i % 3],
}


def singles(pairs: list[tuple[str, str]], n: int, seed: int) -> tuple[torch.Tensor, list[tuple[str, str]]]:
    """n single-object scenes, uint8 NHWC, each of a pairing drawn from `pairs`."""
    rng, images, drawn = random.Random(seed), [], []
    for i in range(n):
        pair = rng.choice(pairs)
        images.append(np.asarray(world.render(world.place(rng, seed * 10**7 + i, [pair]), 64)))
        drawn.append(pair)
    return torch.from_numpy(np.stack(images)), drawn


def pixels(u8: torch.Tensor) -> torch.Tensor:
    """Mean and std 0.5 (timm's config of the bundled tower), in training and evaluation alike. The demo's
    open_clip preprocessing uses CLIP's mean and std instead, so this probe's zero-shot is its own, not
    `compclip eval`'s (the same protocol on differently normalised pixels)."""
    return u8.permute(0, 3, 1, 2).float() / 127.5 - 1


class Probe:
    """Zero-shot shape and colour on the world's seen split, and a linear probe of shape."""

    def __init__(self, world_dir: Path, tokenizer, shapes: list[str], colors: list[str]):
        self.tasks = {}
        for task in ("shape", "color"):
            root = world_dir / "test_seen" / "zeroshot" / task
            classes = sorted(p.name for p in root.iterdir() if p.is_dir())
            templates = [t for t in (root / "templates.txt").read_text().splitlines() if t]
            files = [(c, f) for c in classes for f in sorted((root / c).glob("*.png"))]
            images = torch.from_numpy(np.stack([np.asarray(Image.open(f).convert("RGB")) for _, f in files]))
            labels = torch.tensor([classes.index(c) for c, _ in files])
            self.tasks[task] = (tokenizer([t.format(c) for c in classes for t in templates]), len(templates), images, labels)
        everything = [(c, s) for c in colors for s in shapes]
        self.images, drawn = singles(everything, 3000, 7)
        self.labels = torch.tensor([shapes.index(s) for _, s in drawn])
        self.n_shapes = len(shapes)

    @torch.no_grad()
    def zero_shot(self, model) -> dict[str, float]:
        out = {}
        for task, (text, n_templates, images, labels) in self.tasks.items():
            embedded = F.normalize(model.encode_text(text), dim=-1)
            classes = F.normalize(embedded.view(-1, n_templates, embedded.shape[-1]).mean(1), dim=-1)
            image = F.normalize(model.encode_image(pixels(images)), dim=-1)
            out[task] = round(100 * (image @ classes.T).argmax(1).eq(labels).float().mean().item(), 1)
        return out

    def linear(self, model) -> float:
        with torch.no_grad():
            feats = torch.cat([model.encode_image(pixels(self.images[i:i + 500])) for i in range(0, len(self.images), 500)])
        feats = (feats - feats[:2000].mean(0)) / (feats[:2000].std(0) + 1e-6)
        head = nn.Linear(feats.shape[1], self.n_shapes)
        opt = torch.optim.Adam(head.parameters(), lr=1e-2)
        for _ in range(300):
            loss = F.cross_entropy(head(feats[:2000]), self.labels[:2000])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            return round(100 * head(feats[2000:]).argmax(1).eq(self.labels[2000:]).float().mean().item(), 1)

    def __call__(self, model) -> dict[str, float]:
        model.eval()
        out = {**self.zero_shot(model), "shape linear probe": self.linear(model)}
        model.train()
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("world", type=Path, help="a `compclip world generate` folder")
    parser.add_argument("--tower", choices=("conv", "patch"), default="conv")
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--phase1", type=int, default=600, help="steps on single objects first")
    parser.add_argument("--phase1-captions", choices=CAPTIONS, default="shape")
    parser.add_argument("--phase2", choices=("world", *CAPTIONS), default="world")
    parser.add_argument("--eval-every", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)

    manifest = json.loads((args.world / "manifest.json").read_text())
    colors = list(world.COLORS)[: manifest["config"]["colors"]]
    shapes = list(world.SHAPES)[: manifest["config"]["shapes"]]
    held = {tuple(p) for p in manifest["heldout"]}
    seen = [(c, s) for c in colors for s in shapes if (c, s) not in held]

    name = {"conv": "compclip-tiny-siglip-conv", "patch": "compclip-tiny-siglip"}[args.tower]
    config = json.loads((CONFIG_DIR / f"{name}.json").read_text())
    model = open_clip.create_model(name, pretrained=None, output_dict=True)
    tokenizer = open_clip.SimpleTokenizer(context_length=config["text_cfg"]["context_length"])  # as compclip does: CLIP BPE
    loss_fn = open_clip.loss.SigLipLoss()
    probe = Probe(args.world, tokenizer, shapes, colors)

    single_images, drawn = singles(seen, 8000, 1)
    single_text = {kind: tokenizer([make(i, c, s) for i, (c, s) in enumerate(drawn)])
                   for kind, make in CAPTIONS.items() if kind in (args.phase1_captions, args.phase2)}
    if args.phase2 == "world":
        world_images = torch.from_numpy(np.load(args.world / "train" / "images.npy"))
        with (args.world / "train" / "scenes.jsonl").open() as f:
            world_text = tokenizer([json.loads(line)["caption"] for line in f])

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    generator = torch.Generator().manual_seed(args.seed)
    start = time.perf_counter()
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = 1e-3 * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        kind = args.phase1_captions if step < args.phase1 else args.phase2
        if kind == "world":
            idx = torch.randint(0, len(world_images), (128,), generator=generator)
            images, text = world_images[idx], world_text[idx]
        else:
            idx = torch.randint(0, len(single_images), (128,), generator=generator)
            images, text = single_images[idx], single_text[kind][idx]
        out = model(pixels(images), text)
        loss = loss_fn(out["image_features"], out["text_features"], out["logit_scale"], out["logit_bias"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            print(f"step {step + 1:5d} ({kind:12s}) loss {loss.item():.3f}  {probe(model)}  {time.perf_counter() - start:.0f} s",
                  flush=True)


if __name__ == "__main__":
    main()
