"""`compclip demo` (what `make demo` runs): the whole method end to end on the binding world.

1. generate the world (cached); 2. extract the training captions' concepts (cached): noun phrases, POS tags, scene graphs;
3. pretrain a small SigLIP-style model from scratch with the plain SigLIP loss;
4. fine-tune that base once per method (by default SigLIP and C2LIP; `--methods` adds the peers:
   hardneg, negclip, clic, occlip) with equal steps, learning rate and seed;
5. evaluate every model on the seen and unseen test splits and print the comparison, writing
   `results/<model>/<split>/<benchmark>.json`, `report/report.md` and the plots under `--out`.
Every stage is skipped when its output exists, so a re-run reuses what was done.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .errors import UsageError

MODEL = "compclip-tiny-siglip"
BENCHMARKS = "sugarcrepe,sugarcrepe_pp,zeroshot,retrieval"
SPLITS = ("seen", "unseen")
COLUMNS = ("SC add", "SC replace", "SC swap", "SC swap-att", "SC++ ITT", "SC++ TOT", "ZS shape", "ZS colour",
           "retrieval R@1", "retrieval R@5")  # headers of compclip.eval.report.COLUMNS


def _train(out: Path, **kwargs) -> Path:
    """Train unless `out` already has its final checkpoint; returns the checkpoint folder."""
    from .train import TrainConfig, train

    final = out / "checkpoints" / f"step_{kwargs['steps']:07d}"
    if not final.is_dir():
        train(TrainConfig(out=str(out), **kwargs))
    return final


def run_demo(
    out: Path = Path("runs/demo"),
    methods: str = "siglip,c2lip",
    n_train: int = 20_000,
    n_test: int = 500,
    pretrain_steps: int = 1000,
    steps: int = 300,
    batch_size: int = 128,
    seed: int = 0,
    workers: int = 2,
) -> dict[str, dict[str, dict[str, float]]]:
    from .concepts import build_store, iter_captions
    from .eval import build_report, evaluate
    from .eval.report import column_value
    from .methods import list_methods
    from .world import WorldConfig, generate

    for flag, value in (("--pretrain-steps", pretrain_steps), ("--steps", steps), ("--batch-size", batch_size)):
        if value < 1:
            raise UsageError(f"{flag} must be at least 1, not {value}")
    unknown = [m for m in methods.split(",") for part in m.split("+") if part not in list_methods()]
    if unknown:
        raise UsageError(f"--methods: unknown {unknown}; known: {', '.join(list_methods())}")
    console, start = Console(), time.time()
    out = Path(out)
    world = generate(out / "world", WorldConfig(seed=seed, n_train=n_train, n_test=n_test, size=64), workers)
    console.print(f"[1/5] binding world in {world} ({n_train} training scenes, {n_test} per test split)")
    images = world / "train" / "images.npy"
    # pos: negclip and clic; graph: occlip
    build_store(iter_captions(world / "train" / "scenes.jsonl"), out / "concepts", "noun-phrases,pos,graph", workers=workers)
    console.print(f"[2/5] concepts of the training captions in {out / 'concepts'}")
    common = {"train_data": str(images), "batch_size": batch_size, "seed": seed, "workers": workers, "save_every": 10**9, "keep": 1}
    base = _train(out / "train" / "base", method="siglip", model=MODEL, steps=pretrain_steps, lr=1e-3, warmup=100,
                  optimizer="adamw", weight_decay=0.1, **common)
    console.print(f"[3/5] base pretrained from scratch ({pretrain_steps} SigLIP steps): {base}")
    models = {"base": base}
    for method in methods.split(","):
        models[f"{method}-ft"] = _train(out / "train" / method, method=method, model=str(base), steps=steps, lr=1e-4,
                                        warmup=20, optimizer="adamw", concepts=str(out / "concepts"), **common)
    console.print(f"[4/5] fine-tuned {', '.join(methods.split(','))} from the base, {steps} steps each, seed {seed}")
    table = Table(title=f"binding world: accuracy / recall in % (test seen and unseen, {n_test} scenes each)")
    table.add_column("model")
    table.add_column("split")
    for header in COLUMNS:
        table.add_column(header, justify="right")
    folders, numbers = [], {}
    for name, ckpt in models.items():
        for split in SPLITS:
            folder = out / "results" / name / split
            if not all((folder / f"{b}.json").is_file() for b in BENCHMARKS.split(",")):
                evaluate(str(ckpt), BENCHMARKS, folder, data=world / f"test_{split}", workers=workers)
            records = {b: json.loads((folder / f"{b}.json").read_text()) for b in BENCHMARKS.split(",")}
            row = {h: column_value(records, h) for h in COLUMNS}
            numbers.setdefault(name, {})[split] = row
            cells = (f"{v:.1f}" if isinstance(v, float | int) else str(v) for v in row.values())  # "n/a": a score the model lacks
            table.add_row(name, split, *cells)
            folders.append(folder)
    report = build_report(folders, out / "report")
    console.print("[5/5] evaluated every model on both splits")
    console.print(table)
    console.print(f"results in {out / 'results'}, report in {report}; {time.time() - start:.0f} s")
    return numbers
