"""Method variants fine-tuned from `make demo`'s base on the binding world, over seeds, scored on the unseen split.

Each variant trains 300 steps from the demo's base with the demo's data and learning rate, changing
one thing: C2LIP's xac weight, xac temperature or separate phrase encoding; CLIC's learning rate;
OC-CLIP's patch-token layer, default queries, L_rel, a frozen image tower or a 10× lower backbone
learning rate (its module keeps 2e-4); or the fine-tune's length (1,200 steps). Every variant runs once
per seed (SigLIP, C2LIP and OC-CLIP with the demo's settings reuse the demo's own fine-tunes where it has
them); the table gives the mean ± 95 % interval over seeds and the paired difference from the
reference variant (SigLIP fine-tuning unless --reference) with the same seeds (`*`: its interval
excludes zero). Run `make demo` first (or pass its --out as --demo).

Run: .venv/bin/python benchmarks/world_ablation.py [--demo runs/demo] [--seeds 0,1,2] [--reference siglip] [NAME ...]
"""
import argparse
import json
from pathlib import Path

from compclip.eval import evaluate
from compclip.eval.stats import fmt, fmt_difference, interval, paired
from compclip.train import TrainConfig, train

VARIANTS = {
    "siglip": {"method": "siglip"},
    "c2lip": {},
    "xac0.1": {"method_options": {"lambda_xac": 0.1}},
    "temp1": {"method_options": {"xac_temperature": 1.0}},
    "separate": {"method_options": {"concept_mode": "separate"}},
    "clic-lr1e-5": {"method": "clic", "lr": 1e-5},
    "occlip": {"method": "occlip"},
    "occlip-layer0": {"method": "occlip", "method_options": {"layer": 0}},
    "occlip-no-defaults": {"method": "occlip", "method_options": {"default_queries": 0}},
    "occlip-no-rel": {"method": "occlip", "method_options": {"lambda_rel": 0.0}},
    "occlip-lock-image": {"method": "occlip", "lock_image": True},
    "occlip-lr1e-5": {"method": "occlip", "lr": 1e-5},
    "siglip-1200": {"method": "siglip", "steps": 1200},
    "c2lip-1200": {"steps": 1200},
}
DEMO_RUNS = ("siglip", "c2lip", "occlip")  # variants with the demo's exact settings
COLUMNS = {"swap-att": ("sugarcrepe", "swap_att"), "replace": ("sugarcrepe", "replace"), "ITT": ("sugarcrepe_pp", "overall_itt"),
           "ZS shape": ("zeroshot", "shape"), "ZS colour": ("zeroshot", "color"), "R@1": ("retrieval", "mean_recall@1")}


def scores(demo: Path, name: str, seed: int) -> dict[str, float]:
    """One variant and seed: trained and evaluated unless its results exist; the columns in %."""
    out = demo / "ablation" / name / f"seed{seed}"
    results = out / "unseen"
    if name in DEMO_RUNS:  # the demo's own fine-tune, when it ran this method with this seed
        first = json.loads((demo / "report" / "seeds.json").read_text())["seeds"][0] if (demo / "report" / "seeds.json").is_file() else 0
        demo_results = demo / "results" / (f"{name}-ft" if seed == first else f"{name}-ft-s{seed}") / "unseen"
        if (demo_results / "retrieval.json").is_file():
            results = demo_results
    if not (results / "retrieval.json").is_file():
        base = next((demo / "train" / "base" / "checkpoints").glob("step_*"))
        common = {"model": str(base), "train_data": str(demo / "world" / "train" / "images.npy"), "concepts": str(demo / "concepts"),
                  "batch_size": 128, "seed": seed, "workers": 2, "shuffle": 0, "save_every": 10**9, "keep": 1, "steps": 300, "lr": 1e-4,
                  "warmup": 20, "optimizer": "adamw", "out": str(out)}
        cfg = TrainConfig(**{"method": "c2lip", **common, **VARIANTS[name]})
        final = out / "checkpoints" / f"step_{cfg.steps:07d}"
        if not final.is_dir():
            train(cfg)
        evaluate(str(final), "sugarcrepe,sugarcrepe_pp,zeroshot,retrieval", results, data=demo / "world" / "test_unseen")
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
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    names = [args.reference] + [n for n in args.names if n != args.reference]
    table = {n: [scores(args.demo, n, s) for s in seeds] for n in names}
    print(f"unseen split, mean ± 95 % interval over seeds {args.seeds}; Δ: paired difference from {args.reference} (* excludes 0)")
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
