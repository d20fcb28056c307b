"""Method variants fine-tuned from `make demo`'s base on the binding world, scored on the unseen split.

Each variant trains 300 steps from `runs/demo/train/base` with the demo's data, seed and
learning rate, changing one thing: C2LIP's xac weight, xac temperature or separate phrase
encoding; CLIC's learning rate. Run `make demo` first.
Run: .venv/bin/python benchmarks/world_ablation.py [NAME ...]
"""
import json
import sys
from pathlib import Path

from compclip.eval import evaluate
from compclip.train import TrainConfig, train

DEMO = Path("runs/demo")
VARIANTS = {
    "c2lip": {},
    "xac0.1": {"method_options": {"lambda_xac": 0.1}},
    "temp1": {"method_options": {"xac_temperature": 1.0}},
    "separate": {"method_options": {"concept_mode": "separate"}},
    "clic-lr1e-5": {"method": "clic", "lr": 1e-5},
}


def main(names: list[str]) -> None:
    base = DEMO / "train" / "base" / "checkpoints" / "step_0001000"
    common = {"model": str(base), "train_data": str(DEMO / "world" / "train" / "images.npy"), "concepts": str(DEMO / "concepts"),
              "batch_size": 128, "seed": 0, "workers": 2, "save_every": 10**9, "keep": 1, "steps": 300, "lr": 1e-4, "warmup": 20,
              "optimizer": "adamw"}
    print(f"{'variant':12s} {'swap-att':>9s} {'replace':>8s} {'ITT':>6s} {'ZS shape':>9s} {'R@1':>6s}")
    for name in names or list(VARIANTS):
        out = DEMO / "ablation" / name
        if not (out / "checkpoints" / "step_0000300").is_dir():
            train(TrainConfig(out=str(out), **{"method": "c2lip", **common, **VARIANTS[name]}))
        m = {k: v["metrics"] for k, v in evaluate(str(out / "checkpoints" / "step_0000300"), "sugarcrepe,sugarcrepe_pp,zeroshot,retrieval",
                                                   out / "unseen", data=DEMO / "world" / "test_unseen").items()}
        row = (m["sugarcrepe"]["swap_att"]["acc"], m["sugarcrepe"]["replace"], m["sugarcrepe_pp"]["overall_itt"],
               m["zeroshot"]["shape"]["acc"], m["retrieval"]["mean_recall@1"])
        print(f"{name:12s} " + " ".join(f"{100 * v:8.1f}" for v in row),
              json.dumps(dict(zip(("swap_att", "replace", "itt", "zs_shape", "r@1"), row, strict=True))))


if __name__ == "__main__":
    main(sys.argv[1:])
