"""The table over worlds of worlds run apart: each on its own machine or in its own job, as
`compclip demo --methods M --seeds S --world-seeds W --out OUT_W` (the study's worlds are `--world-seeds 0`, `1`
and `2` of `--methods siglip,attswap,c2lip,hardneg,clic,occlip,ceclip,svlc,dac,conclip,tripletclip --seeds 0,1,2`,
each world the same there as in one `compclip demo --study`). Each world's numbers, seed by seed, come from its
`OUT_W/report/seeds.json`; they are tabulated as one `compclip demo --world-seeds` run tabulates them
(`compclip.demo.tabulate`): the table over worlds, each world's own table, the reading and `seeds.png`, written to
--out with a `seeds.json` of the worlds together.

Run: .venv/bin/python research/study_table.py docs/study/world-0.json docs/study/world-1.json docs/study/world-2.json \\
         --out runs/study-table
"""
import argparse
import json
import math
from pathlib import Path

from compclip.demo import log_console, tabulate, write_seeds_report
from compclip.errors import UsageError


def read_worlds(paths: list[Path]) -> tuple[str, str, dict[int, dict]]:
    """The fine-tuning seeds and test scope the files share, and {world: numbers} in the files' order (a metric a
    benchmark lacks, null in the JSON, is NaN again); worlds must not repeat, nor their seeds, scope or models differ."""
    first, by_world = json.loads(paths[0].read_text()), {}
    for path in paths:
        report = json.loads(path.read_text())
        for key in ("seeds", "scope"):
            if report[key] != first[key]:
                raise UsageError(f"{path}: {key} {report[key]}, where {paths[0]} has {first[key]}")
        for w, numbers in report["by_world"].items():
            if int(w) in by_world:
                raise UsageError(f"{path}: world {w} is already in an earlier file")
            models = sorted(next(iter(by_world.values()), numbers))
            if sorted(numbers) != models:
                raise UsageError(f"{path}: world {w} has the models {sorted(numbers)}, the first world {models}")
            by_world[int(w)] = {m: {sp: {h: [math.nan if v is None else v for v in vs] for h, vs in cols.items()}
                                    for sp, cols in by_split.items()} for m, by_split in numbers.items()}
    return ",".join(map(str, first["seeds"])), first["scope"], by_world


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path, help="Each world's report/seeds.json (or a copy of it).")
    parser.add_argument("--out", type=Path, required=True, help="Where seeds.md, seeds.json and seeds.png go.")
    args = parser.parse_args()
    try:
        seeds, scope, by_world = read_worlds(args.reports)
    except UsageError as error:
        parser.error(str(error))
    numbers, markdown = tabulate(by_world, seeds, scope, args.out, log_console())
    write_seeds_report(args.out, markdown, seeds, scope, by_world, numbers)


if __name__ == "__main__":
    main()
