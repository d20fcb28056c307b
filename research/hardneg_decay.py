"""How far the hardneg recipes' weight decay moves a CLIP's weights, read two ways: added to the gradient (torch's Adam,
`--optimizer adam`) or decoupled from it (AdamW, `--optimizer adamw`, the recipes' reading of Rösch et al. §3.2).

    python research/hardneg_decay.py [--steps 200] [--seed 0]

A stand-in for the recipe's ViT-B/32: the bundled compclip-tiny-clip from its seeded initialisation, trained with
`--recipe hardneg-color` (lr 5e-6, weight decay 0.1, no schedule, clipping at 1.0, colour captions only) on the shipped
Flickr photos' captions, batch 16, fp32, --steps steps three times from the same start and data: no decay, the decay
coupled, the decay decoupled. For the weights the decay applies to, it prints how far each run ends from the start and
from the run without decay (mean and largest |Δw|), beside the bounds: an Adam step moves a weight by about lr at most,
so lr × steps; the decoupled decay alone shrinks w by the factor 1 − (1 − lr·wd)^steps. The binding world's side of the
comparison is `research/world_ablation.py`'s variants `hardneg-wd-adamw` and `hardneg-wd-adam`.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from compclip.train import TrainConfig, Trainer

FLICKR = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k_1k" / "captions.csv"
READINGS = {"no decay": {"optimizer": "adamw", "weight_decay": 0.0}, "coupled (adam)": {"optimizer": "adam"},
            "decoupled (adamw)": {"optimizer": "adamw"}}


def trained(reading: dict, steps: int, seed: int, out: Path) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], set[str]]:
    """The start, the end and the names of the decayed weights of one run of the recipe under `reading`."""
    cfg = TrainConfig.from_given({"recipe": "hardneg-color", "model": "compclip-tiny-clip", "train_data": str(FLICKR),
                                  "out": str(out), "steps": steps, "batch_size": 16, "global_batch_size": 16, "precision": "fp32",
                                  "workers": 0, "device": "cpu", "seed": seed, "save_every": 10**9, "report_to": "none",
                                  "grad_clip_norm": 1.0, **reading})
    trainer = Trainer(cfg)
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    start = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    decayed = {names[id(p)] for g in trainer.optimizer.param_groups if cfg.weight_decay and g["weight_decay"] for p in g["params"]
               if id(p) in names}
    trainer.run()
    return start, {n: p.detach().clone() for n, p in trainer.model.named_parameters()}, decayed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = {name: trained(reading, args.steps, args.seed, Path(tmp) / str(i)) for i, (name, reading) in enumerate(READINGS.items())}
    start, plain, _ = runs["no decay"]
    decayed = sorted(runs["decoupled (adamw)"][2])
    flat = torch.cat([start[n].flatten() for n in decayed])
    lr, wd = 5e-6, 0.1
    print(f"compclip-tiny-clip, --recipe hardneg-color, {args.steps} steps of 16, seed {args.seed}: {flat.numel():,} decayed weights "
          f"(mean |w| {flat.abs().mean():.2e})")
    print(f"bounds: lr × steps = {lr * args.steps:.1e}; decoupled shrink × mean |w| = "
          f"{(1 - (1 - lr * wd) ** args.steps) * float(flat.abs().mean()):.1e}")
    print("| reading | mean |Δw| from start | mean |Δw| from no decay | max |Δw| from no decay |")
    print("| --- | --- | --- | --- |")
    for name, (_, end, _) in runs.items():
        moved = torch.cat([(end[n] - start[n]).flatten() for n in decayed]).abs()
        apart = torch.cat([(end[n] - plain[n]).flatten() for n in decayed]).abs()
        print(f"| {name} | {moved.mean():.2e} | {apart.mean():.2e} | {apart.max():.2e} |")


if __name__ == "__main__":
    main()
