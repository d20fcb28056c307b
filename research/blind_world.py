"""What the texts alone score in the binding world: every model a demo trained, evaluated with `compclip eval --blind` on
the seen and unseen test splits (SugarCrepe's swap-attribute and the other splits the world writes).

The world's seen split is built so that a text prior cannot pass (each swap's two captions name pairings the training
captions hold equally often): the blind swap-attribute there should be about 50 % for every model, a check of the world.

`--variants hardneg,clic,occlip` adds fine-tunes the demo did not train, from `research/world_ablation.py` (trained
there with the demo's settings and seed 0 unless they exist).

Run: .venv/bin/python research/blind_world.py DEMO_OUT [--variants NAME,...] [--out DIR]   (DEMO_OUT: a `compclip demo --out` folder)
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from compclip.eval import EvalConfig, evaluate
from compclip.models.checkpoint import RunFolder
from compclip.stats import binomial_se, fmt
from world_ablation import VARIANTS, trained


def checkpoints(demo: Path) -> dict[str, Path]:
    """Each trained model of the demo: its newest checkpoint, by the run's name (base, siglip, c2lip, ...)."""
    newest = {run.name: RunFolder(run).latest() for run in sorted((demo / "train").iterdir())}
    return {name: checkpoint for name, checkpoint in newest.items() if checkpoint}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("demo", type=Path)
    parser.add_argument("--variants", default="", help=f"world_ablation variants to add: {', '.join(VARIANTS)}")
    parser.add_argument("--out", type=Path, default=None, help="results folder  [default: DEMO/blind]")
    args = parser.parse_args()
    out = args.out or args.demo / "blind"
    models = checkpoints(args.demo) | {name: trained(args.demo, name, 0) for name in filter(None, args.variants.split(","))}
    rows = []
    for name, checkpoint in models.items():
        for split in ("seen", "unseen"):
            records = evaluate(EvalConfig(model=str(checkpoint), benchmark="sugarcrepe,sugarcrepe_pp", out=str(out / name / split),
                                          data_root=str(args.demo / "world" / f"test_{split}"), device="cpu", blind=True))
            sc = records["sugarcrepe"]
            for key in ("swap_att", "swap_obj", "replace_att"):
                if key in sc["metrics"]:
                    real, blind, n = sc["metrics"][key]["acc"], sc["blind"][key]["acc"], sc["metrics"][key]["n"]
                    rows.append({"model": name, "split": split, "benchmark": f"sugarcrepe/{key}", "acc": real, "blind": blind, "n": n})
    print("| model | split | benchmark | accuracy | blind ± 95 % (binomial, n items) | image-grounded |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        half = 1.96 * binomial_se(r["blind"], r["n"])
        print(f"| {r['model']} | {r['split']} | {r['benchmark']} | {100 * r['acc']:.1f} | {fmt(100 * r['blind'], 100 * half)} "
              f"(n {r['n']}) | {100 * (r['acc'] - r['blind']):+.1f} |")
    (out / "blind.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
