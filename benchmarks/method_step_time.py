"""Each method's time per fine-tuning step in the binding world, beside SigLIP's: the demo's own fine-tune (its base, its
world's training images, its concepts, batch 64, fp32 on the CPU) run for `--steps` steps per method, one method after
another in one process each, and the median `batch_time` of the steps after the first `--skip` (the first steps pay for
the DataLoader's start and the allocator's growth). What a method adds to a step is its negatives' or dense texts'
encoding and its loss terms: the ratio to SigLIP is that cost.
Run after `compclip demo --out DEMO` (any --methods): .venv/bin/python benchmarks/method_step_time.py DEMO
[--methods siglip,attswap,ceclip,svlc,dac,conclip,tripletclip] [--steps 40] [--skip 10]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def step_times(demo: Path, method: str, steps: int, work: Path) -> list[float]:
    """The `batch_time` of each step of `method` fine-tuned from the demo's base as the demo fine-tunes it."""
    run = next(p for p in sorted((demo / "train").glob("*/checkpoints/step_*/config.json")) if not p.parts[-4].startswith("base"))
    given = json.loads(run.read_text())["train_args"]  # a fine-tune's (not the base's): the base, data, concepts, lr and batch
    out = work / method
    command = [sys.executable, "-m", "compclip", "-q", "train", "--method", method, "--model", given["model"], "--train-data",
               given["train_data"], "--concepts", given["concepts"], "--batch-size", str(given["batch_size"]), "--lr", str(given["lr"]),
               "--steps", str(steps), "--warmup", str(given["warmup"]), "--workers", str(given["workers"]), "--device", "cpu",
               "--log-every", "1", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise SystemExit(f"{method}: {done.stderr.strip().splitlines()[-1]}")
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return [r["batch_time"] for r in log if "batch_time" in r]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("demo", type=Path)
    parser.add_argument("--methods", default="siglip,attswap,ceclip,svlc,dac,conclip,tripletclip")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--skip", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        medians = {m: statistics.median(step_times(args.demo, m, args.steps, Path(work))[args.skip:]) for m in args.methods.split(",")}
    base = medians.get("siglip")
    print("| method | s a step (median) | × SigLIP's |\n| --- | --- | --- |")
    for method, median in medians.items():
        print(f"| {method} | {median:.3f} | {median / base:.2f} |" if base else f"| {method} | {median:.3f} | |")


if __name__ == "__main__":
    main()
