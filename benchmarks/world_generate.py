"""Binding-world generation speed at 64 px: `compclip world generate` (2 worker processes) beside a
plain single-process loop that samples, renders and saves the same scenes.
Target: >= 500 images/s on 2 cores at 64 px.
Run: .venv/bin/python benchmarks/world_generate.py [--n 10000]
"""
import argparse
import random
import tempfile
import time
from pathlib import Path

from compclip.world import COLORS, SHAPES, WorldConfig, generate, place, render


def plain_loop(n: int, folder: Path) -> None:
    pairs = [(c, s) for c in COLORS for s in SHAPES]
    for i in range(n):
        rng = random.Random(i)
        render(place(rng, i, rng.sample(pairs, rng.randint(1, 4))), 64).save(folder / f"{i}.png")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = WorldConfig(n_train=args.n, n_val=1, n_test=1, size=64)  # a split needs at least one scene
        start = time.perf_counter()
        generate(Path(tmp) / "world", cfg, workers=2)
        ours = time.perf_counter() - start
        (Path(tmp) / "loop").mkdir()
        start = time.perf_counter()
        plain_loop(args.n, Path(tmp) / "loop")
        loop = time.perf_counter() - start
    print(f"compclip world generate (2 workers, captions and scene records included): {args.n / ours:7.0f} images/s")
    print(f"single-process render-and-save loop:                                        {args.n / loop:7.0f} images/s")
    print(f"ratio {loop / ours:.2f}x")


if __name__ == "__main__":
    main()
