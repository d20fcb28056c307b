"""Work split across the tasks of a SLURM job array, or by `--part i/n`: `compclip concepts` splits its captions so,
and `compclip eval` its list of models (split again among torchrun's ranks). Nothing heavy is imported here: a command
reads its part before torch or spaCy."""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from .errors import UsageError

log = logging.getLogger("compclip")


def parse_part(text: str | None, env: Mapping[str, str] = os.environ, what: str = "the captions") -> tuple[int, int]:
    """`"i/n"` (0-based) as (i, n); without it, a SLURM array task's place in its array, else (0, 1). `what` names what
    the parts split, in the warning."""
    if text is None:
        if "SLURM_ARRAY_TASK_COUNT" not in env:
            return 0, 1
        i, n = slurm_array_place(env)
        if n > 1:  # said first: a job array made for something else would otherwise parse a part and wait for the rest
            log.warning("no --part given, and this is task %d of a SLURM array of %d: part %d/%d of %s only (the array's "
                        "other tasks take the rest; --part 0/1 takes them all here)", i, n, i, n, what)
        return i, n
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise UsageError(f"--part {text}: expected i/n, e.g. 0/8") from None
    if n < 1:
        raise UsageError(f"--part {text}: n, the number of parts, must be at least 1")
    if not 0 <= i < n:
        raise UsageError(f"--part {text}: i must be in 0..{n - 1} (parts count from 0)")
    return i, n


def slurm_array_place(env: Mapping[str, str]) -> tuple[int, int]:
    """This task's place among its array's tasks, for any evenly stepped array: `--array=0-6:2` gives ids 0, 2, 4, 6 the
    places 0..3 of 4 (id − min) / step; a `%` limit changes nothing here, it only bounds how many run at once. An array
    whose ids are no evenly stepped range (`--array=1,3,10`) has no place to read: one line asking for --part."""
    try:
        task, count = int(env["SLURM_ARRAY_TASK_ID"]), int(env["SLURM_ARRAY_TASK_COUNT"])
        first, step = int(env.get("SLURM_ARRAY_TASK_MIN", "0")), int(env.get("SLURM_ARRAY_TASK_STEP", "1"))
        last = int(env.get("SLURM_ARRAY_TASK_MAX", str(first + step * (count - 1))))
    except (KeyError, ValueError):
        raise UsageError("SLURM_ARRAY_TASK_ID, _COUNT, _MIN, _MAX or _STEP is not a whole number: give --part i/n") from None
    spans = f"SLURM array task {task} of ids {first}-{last}:{step}, {count} tasks"
    if step < 1 or (last - first) != step * (count - 1):
        raise UsageError(f"{spans}: its ids are no evenly stepped range, so its place cannot be read: give each task --part i/n")
    place, off_step = divmod(task - first, step)
    if off_step or not 0 <= place < count:
        raise UsageError(f"{spans}: task {task} is not one of the array's ids: give --part i/n")
    return place, count


def rank_part(part: tuple[int, int], env: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """`part` split again among the ranks torchrun starts (RANK of WORLD_SIZE, as it sets them; no process group is
    needed): rank r of w takes part i·w + r of n·w, so that the ranks of every task together take the task's part once."""
    try:
        rank, world = int(env.get("RANK", "0")), int(env.get("WORLD_SIZE", "1"))
    except ValueError:
        raise UsageError(f"RANK={env.get('RANK')} WORLD_SIZE={env.get('WORLD_SIZE')}: not whole numbers (torchrun sets both)") from None
    if not 0 <= rank < world:
        raise UsageError(f"RANK={rank} WORLD_SIZE={world}: the rank must be in 0..{world - 1}")
    i, n = part
    return i * world + rank, n * world
