"""What the demo spends after its fine-tunes, on a demo folder a run left (`compclip demo --out DIR`):

    python benchmarks/demo_report.py --demo runs/demo

1. the paired bootstrap's resample counts (each draw's items counted into weights, `compare._weights`) beside the
   `np.add.at` it replaced, at the demo's size (500 draws of 1,250 items, 20 chunks of `RESAMPLES`), the same counts
   asserted;
2. `build_report` over the demo's result folders (every model and split, the paired comparisons included), as the demo
   calls it;
3. `evaluate` of one fine-tuned model on one test split (the demo's 4 benchmarks, `workers=0`, on the CPU).
Medians of `--repeats` runs after a first.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from compclip.demo import BENCHMARKS, SPLITS
from compclip.eval import EvalConfig, build_report, evaluate
from compclip.eval.compare import CHUNK, RESAMPLES, _weights


def np_add_at(draws: np.ndarray, size: int) -> np.ndarray:
    """The counts as they were made before: one unbuffered `np.add.at`."""
    counts = np.zeros((draws.shape[0], size))
    np.add.at(counts, (np.arange(draws.shape[0])[:, None], draws), 1)
    return counts / draws.shape[1]


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", type=Path, required=True, help="a demo's --out folder (results/ and train/ in it)")
    parser.add_argument("--items", type=int, default=1250, help="items a split: the demo's --n-test")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    draws = np.random.default_rng(0).integers(0, args.items, (CHUNK, args.items))
    assert np.array_equal(np_add_at(draws, args.items), _weights(draws, args.items))
    chunks = RESAMPLES // CHUNK
    old = timed(lambda: [np_add_at(draws, args.items) for _ in range(chunks)], args.repeats)
    new = timed(lambda: [_weights(draws, args.items) for _ in range(chunks)], args.repeats)
    print(f"one interval's counts ({RESAMPLES:,} draws of {args.items:,} items): np.add.at {old:.3f} s, bincount {new:.3f} s, "
          f"{old / new:.1f}x")

    results = sorted(p for p in (args.demo / "results").glob("*/*") if p.is_dir())
    scratch = Path(tempfile.mkdtemp(prefix="compclip-demo-report-"))
    try:
        report = timed(lambda: build_report(results, scratch / "report"), args.repeats)
        print(f"build_report over {len(results)} result folders: {report:.2f} s")
        model = next(p for p in sorted((args.demo / "train").glob("*/checkpoints/step_*")) if not p.parent.parent.name.startswith("base"))
        split = SPLITS[-1]

        def one_evaluation():
            shutil.rmtree(scratch / "eval", ignore_errors=True)
            evaluate(EvalConfig(str(model), BENCHMARKS, str(scratch / "eval"), data_root=str(args.demo / "world" / f"test_{split}"),
                                workers=0, device="cpu", precision="fp32"))

        print(f"evaluate {model.parent.parent.name} on test_{split} ({BENCHMARKS}): {timed(one_evaluation, args.repeats):.2f} s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
