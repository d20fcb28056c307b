"""Work split across the tasks of a SLURM job array, or by `--part i/n`: `compclip concepts` splits its captions so,
and `compclip eval` its list of models. Nothing heavy is imported here: a command reads its part before torch or spaCy."""
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
        first = int(env.get("SLURM_ARRAY_TASK_MIN", "0"))
        i, n = int(env["SLURM_ARRAY_TASK_ID"]) - first, int(env["SLURM_ARRAY_TASK_COUNT"])
        if n > 1:  # said first: a job array made for something else would otherwise parse a part and wait for the rest
            log.warning("no --part given, and this is task %d of a SLURM array of %d: part %d/%d of %s only (the array's "
                        "other tasks take the rest; --part 0/1 takes them all here)", i, n, i, n, what)
        return i, n
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise UsageError(f"--part {text}: expected i/n, e.g. 0/8") from None
    if not 0 <= i < n:
        raise UsageError(f"--part {text}: i must be in 0..{n - 1} (parts count from 0)")
    return i, n
