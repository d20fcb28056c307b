"""Can a vision tower of the demo's size learn the binding world's shapes at all? A supervised probe.

    python research/world_shape_probe.py --towers vit-patch8,vit-convstem,cnn --steps 600

Single-object 64-px scenes (the zero-shot test's kind; 8,000 to train, 1,000 to test, every colour)
and plain cross-entropy on the shape, batch 128, AdamW 1e-3: the easiest form of what contrastive
pretraining must learn from captions. Towers, all about the demo base's size:
- `vit-patch8`: the demo's `compclip-tiny-siglip` vision tower (2 blocks, width 64, patch 8, MAP head);
- `vit-convstem`: the same ViT with `compclip.models.bundled.ConvStem` (three 3×3 stride-2 convs with
  GroupNorm instead of the linear patch embedding: the same 8×8 token grid), `compclip-tiny-siglip-conv`'s tower;
- `cnn`: four 3×3 convolutions and global max pooling.
Prints test accuracy every 200 steps. If a tower cannot learn shape here, no caption design will
make it learn shape contrastively in the demo's budget.
"""
import argparse
import random
import time

import numpy as np
import timm
import torch
import torch.nn.functional as F
from torch import nn

from compclip.models.bundled import ConvStem
from compclip.world import scene as world


def tower(name: str, classes: int) -> nn.Module:
    vit = {"img_size": 64, "patch_size": 8, "embed_dim": 64, "depth": 2, "num_heads": 2, "class_token": False, "global_pool": "map",
           "num_classes": classes}
    if name == "vit-patch8":
        return timm.create_model("vit_tiny_patch16_224", **vit)
    if name == "vit-convstem":
        return timm.create_model("vit_tiny_patch16_224", embed_layer=ConvStem, **vit)
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.GELU(), nn.Conv2d(32, 64, 3, 2, 1), nn.GELU(), nn.Conv2d(64, 64, 3, 2, 1),
                             nn.GELU(), nn.Conv2d(64, 64, 3, 1, 1), nn.GELU(), nn.AdaptiveMaxPool2d(1), nn.Flatten(),
                             nn.Linear(64, classes))
    raise SystemExit(f"unknown tower {name!r}")


def singles(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng, images, labels = random.Random(seed), [], []
    for i in range(n):
        shape = rng.choice(world.SHAPES)
        scene = world.place(rng, i, [(rng.choice(list(world.COLORS)), shape)])
        images.append(np.asarray(world.render(scene, 64)))
        labels.append(world.SHAPES.index(shape))
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 127.5 - 1, torch.tensor(labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--towers", default="vit-patch8,vit-convstem,cnn")
    parser.add_argument("--steps", type=int, default=600)
    args = parser.parse_args()
    x_train, y_train = singles(8000, 1)
    x_test, y_test = singles(1000, 2)
    for name in args.towers.split(","):
        torch.manual_seed(0)
        net = tower(name, len(world.SHAPES))
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.1)
        start = time.perf_counter()
        for step in range(args.steps):
            idx = torch.randint(0, len(y_train), (128,))
            loss = F.cross_entropy(net(x_train[idx]), y_train[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            if (step + 1) % 200 == 0:
                with torch.no_grad():
                    acc = (net(x_test).argmax(1) == y_test).float().mean().item()
                print(f"{name:13s} step {step + 1:4d}  shape test accuracy {100 * acc:5.1f} %  (chance 14.3 %)  "
                      f"{time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
