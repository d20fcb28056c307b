"""Method variants fine-tuned from `make demo`'s base on the binding world, over seeds, scored on one test split.

Each variant trains as the demo fine-tunes (1,000 steps from its base, its data and learning rate), changing
one thing: C2LIP's npc weight (3, 10), xac weight (0.1, 1), xac attention (scaled) or temperature, L_npc's
attribute-swap negatives (swapneg; with separate encoding, swapneg-separate, where the positives are encoded as the
negatives are), its concepts limited to modified phrases ("a red square", not "the picture": modified), or separate
phrase encoding (also at λ_npc 0.3); the peers with the demo's settings (hardneg, clic: the study's runs in this
world); CLIC's learning rate; OC-CLIP's patch-token layer, default queries, L_rel, a frozen image tower, a 10× lower
backbone learning rate (its module keeps 2e-4), or its module trained alone first (600 steps, both towers frozen) and
then with them; or the fine-tune's length (1,200 or 3,000 steps;
OC-CLIP's module alone for 3,000); or hardneg with the hardneg recipes' weight decay 0.1 and clipping at 1.0, 100
steps, the decay decoupled (hardneg-wd-adamw, the recipes' reading), added to the gradient (hardneg-wd-adam) or none
(hardneg-no-wd). Every
variant runs once per seed (SigLIP, C2LIP and OC-CLIP with the demo's settings reuse the demo's own fine-tunes where it
has them); the table gives the mean ± 95 % interval over seeds and the paired difference from the reference variant (SigLIP fine-tuning
unless --reference) with the same seeds (`*`: its interval excludes zero). The unseen split unless
--split seen. Run `make demo` first (or pass its --out as --demo). `--device cuda` trains and scores
on the GPU, in fp32 as on the CPU; one process per variant and seed can share one GPU, and a last
run over all of them only reads their results (`docs/benchmarks.md`).

Run: .venv/bin/python research/world_ablation.py [--demo runs/demo] [--seeds 0,1,2] [--reference siglip] [--split unseen]
     [--device cpu|cuda] [--workers 2] [NAME ...]
"""
import argparse
import json
from pathlib import Path

from compclip.demo import BENCHMARKS, FINE_TUNE, RUN_OPTIONS
from compclip.eval import EvalConfig, evaluate
from compclip.models.checkpoint import RunFolder
from compclip.stats import fmt, fmt_difference, interval, paired
from compclip.train import TrainConfig, train

VARIANTS = {
    "siglip": {"method": "siglip"},
    "c2lip": {},
    "npc3": {"method_options": {"lambda_npc": 3.0}},
    "npc10": {"method_options": {"lambda_npc": 10.0}},
    "xac0.1": {"method_options": {"lambda_xac": 0.1}},
    "xac1": {"method_options": {"lambda_xac": 1.0}},
    "scaled": {"method_options": {"xac_attention": "scaled"}},
    "swapneg": {"method_options": {"npc_negatives": "swap_attributes"}},
    "swapneg-separate": {"method_options": {"npc_negatives": "swap_attributes", "concept_mode": "separate"}},
    "modified": {"method_options": {"concept_phrases": "modified"}},
    "temp1": {"method_options": {"xac_temperature": 1.0}},
    "separate": {"method_options": {"concept_mode": "separate"}},
    "separate-npc0.3": {"method_options": {"concept_mode": "separate", "lambda_npc": 0.3}},
    "hardneg": {"method": "hardneg"},
    "hardneg-wd-adamw": {"method": "hardneg", "weight_decay": 0.1, "grad_clip_norm": 1.0, "steps": 100},
    "hardneg-wd-adam": {"method": "hardneg", "optimizer": "adam", "weight_decay": 0.1, "grad_clip_norm": 1.0, "steps": 100},
    "hardneg-no-wd": {"method": "hardneg", "grad_clip_norm": 1.0, "steps": 100},
    "clic": {"method": "clic"},
    "clic-lr1e-5": {"method": "clic", "lr": 1e-5},
    "occlip": {"method": "occlip"},
    "occlip-layer0": {"method": "occlip", "method_options": {"layer": 0}},
    "occlip-no-defaults": {"method": "occlip", "method_options": {"default_queries": 0}},
    "occlip-no-rel": {"method": "occlip", "method_options": {"lambda_rel": 0.0}},
    "occlip-lock-image": {"method": "occlip", "lock_image": True},
    "occlip-lr1e-5": {"method": "occlip", "lr": 1e-5},
    "occlip-module": {"method": "occlip", "lock_image": True, "lock_text": True, "steps": 600},
    "occlip-warm": {"method": "occlip", "after": "occlip-module"},
    "siglip-1200": {"method": "siglip", "steps": 1200},
    "c2lip-1200": {"steps": 1200},
    "siglip-3000": {"method": "siglip", "steps": 3000},
    "c2lip-3000": {"steps": 3000},
    "occlip-3000": {"method": "occlip", "steps": 3000},
    "occlip-module-3000": {"method": "occlip", "lock_image": True, "lock_text": True, "steps": 3000},
}
DEMO_RUNS = ("siglip", "c2lip", "occlip")  # variants with the demo's exact settings
COLUMNS = {"swap-att": ("sugarcrepe", "swap_att"), "replace": ("sugarcrepe", "replace"), "ITT": ("sugarcrepe_pp", "overall_itt"),
           "ZS shape": ("zeroshot", "shape"), "ZS colour": ("zeroshot", "color"), "R@1": ("retrieval", "mean_recall@1")}


def trained(demo: Path, name: str, seed: int, device: str = "cpu", workers: int = 2) -> Path:
    """The variant's final checkpoint, trained unless it exists: from the demo's base, or from the final checkpoint of
    the variant it comes `after` (a second stage: OC-CLIP's module keeps what it learnt, `Trainer`)."""
    spec = dict(VARIANTS[name])
    first = spec.pop("after", None)
    # the base by its step folder: the shipped base is installed without a pointer to it
    start = trained(demo, first, seed, device, workers) if first else RunFolder(demo / "train" / "base").steps()[-1]
    out = demo / "ablation" / name / f"seed{seed}"
    common = {"model": str(start), "train_data": str(demo / "world" / "train" / "images.npy"), "concepts": str(demo / "concepts"),
              "seed": seed, "workers": workers, "device": device, "out": str(out), **FINE_TUNE, **RUN_OPTIONS}
    cfg = TrainConfig(**{"method": "c2lip", **common, **spec})
    final = RunFolder(out).step(cfg.steps)
    if not final.is_dir():
        train(cfg)
    return final


def scores(demo: Path, name: str, seed: int, split: str, device: str = "cpu", workers: int = 2) -> dict[str, float]:
    """One variant and seed on one test split: trained and evaluated unless its results exist; the columns in %."""
    results = demo / "ablation" / name / f"seed{seed}" / split
    if name in DEMO_RUNS:  # the demo's own fine-tune, when it ran this method with this seed
        first = json.loads((demo / "report" / "seeds.json").read_text())["seeds"][0] if (demo / "report" / "seeds.json").is_file() else 0
        demo_results = demo / "results" / (f"{name}-ft" if seed == first else f"{name}-ft-s{seed}") / split
        if (demo_results / "retrieval.json").is_file():
            results = demo_results
    if not (results / "retrieval.json").is_file():
        evaluate(EvalConfig(str(trained(demo, name, seed, device, workers)), BENCHMARKS, str(results),
                            data_root=str(demo / "world" / f"test_{split}"), workers=workers, device=device, precision="fp32"))
    row = {}
    for column, (bench, metric) in COLUMNS.items():
        value = json.loads((results / f"{bench}.json").read_text())["metrics"][metric]
        row[column] = 100 * (value["acc"] if isinstance(value, dict) else value)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(VARIANTS), help=f"variants: {', '.join(VARIANTS)}")
    parser.add_argument("--demo", type=Path, default=Path("runs/demo"))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--reference", default="siglip", choices=list(VARIANTS), help="the variant the Δ columns subtract")
    parser.add_argument("--split", default="unseen", choices=["unseen", "seen"], help="the test split scored")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where variants train and are scored (fp32 on both)")
    parser.add_argument("--workers", type=int, default=2, help="data-loading processes of each run and evaluation")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    names = [args.reference] + [n for n in args.names if n != args.reference]
    table = {n: [scores(args.demo, n, s, args.split, args.device, args.workers) for s in seeds] for n in names}
    print(f"{args.split} split, mean ± 95 % interval over seeds {args.seeds}; Δ: paired difference from {args.reference} (* excludes 0)")
    print("| variant | " + " | ".join(COLUMNS) + " | " + " | ".join(f"Δ {c}" for c in COLUMNS) + " |")
    print("|" + " --- |" * (1 + 2 * len(COLUMNS)))
    for name, rows in table.items():
        cells = [fmt(*interval([r[c] for r in rows])) for c in COLUMNS]
        for c in COLUMNS:
            if name == args.reference:
                cells.append("")
                continue
            cells.append(fmt_difference(*paired([r[c] for r in rows], [r[c] for r in table[args.reference]])))
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
