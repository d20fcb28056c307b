"""Wall time of `compclip --help` and `compclip <cmd> --help` in fresh processes (target ≤ 1 s each).

Each command runs 5 times as its own process, the way a user types it; the median is printed
next to the bare interpreter's start-up (`python -c pass`), the floor no CLI can go under.
Run: `.venv/bin/python benchmarks/cli_startup.py`.
"""
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = 5
COMPCLIP = shutil.which("compclip") or str(Path(sys.executable).with_name("compclip"))
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "compclip --help": [COMPCLIP, "--help"],
    "compclip train --help": [COMPCLIP, "train", "--help"],
    "compclip eval --help": [COMPCLIP, "eval", "--help"],
}


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    for cmd in COMMANDS.values():  # warm the page cache and the bytecode once, as any second run would be
        wall(cmd)
    for name, cmd in COMMANDS.items():
        times = [wall(cmd) for _ in range(RUNS)]
        print(f"{name:24s} median {statistics.median(times):.3f} s  (min {min(times):.3f}, max {max(times):.3f})")


if __name__ == "__main__":
    main()
