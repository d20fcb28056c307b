"""Pretrain the demo's base on its default world and pack it as the one compclip ships (`src/compclip/demo_base/`).

    python research/pack_base.py [--out runs/base] [--workers 2]

Runs the demo's stages 1-3 with `--rebuild-base` (world, concepts skipped, `CURRICULUM` from scratch: about 15 minutes on 2
cores), then `compclip.demo.pack_base` over the final checkpoint with this commit's hash. `compclip demo` installs the
packed base wherever its world and curriculum are the default ones; a run of this script on the same kind of CPU at the
same commit gives the same weights (`shipped.json`'s sha256).
"""
from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from compclip.demo import PRETRAIN_BATCH, PRETRAIN_STEPS, RUN_OPTIONS, DemoConfig, pack_base, pretrain_base, run_device, world_config
from compclip.world import generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/base")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    demo = DemoConfig()
    out = Path(args.out)
    cfg = world_config(None, 0, demo.n_train, demo.n_test)
    world_dir = generate(out / "world", cfg, args.workers)
    common = {"batch_size": PRETRAIN_BATCH, "seed": 0, "workers": args.workers, "device": run_device("cpu"), **RUN_OPTIONS}
    final, _ = pretrain_base(out / "train", world_dir, cfg, PRETRAIN_STEPS, common, rebuild=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    print(json.dumps(pack_base(final, world_dir, commit), indent=1))


if __name__ == "__main__":
    main()
