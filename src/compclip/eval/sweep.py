"""Many models, one command: `compclip eval --model a,b,c` (or a `.txt` file of names, one a line, `#` starting a
comment) scores each model into its own folder, `OUT/<name>/`, which `compclip report` and `compare` take as they take
any results folder. A model whose folder already holds a complete result of every benchmark asked is skipped, so a
sweep stopped part-way goes on where it stopped; and the list splits across the tasks of a SLURM job array (or
`--part i/n`), model k going to part k mod n, as `compclip concepts` splits its captions. Each benchmark's images are
decoded once for the models of one preprocessing (`pixels`), their scores the same as each model's alone."""
from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..io import scratch_dir
from ..parts import parse_part
from .config import EvalConfig
from .pixels import MEMORY_BYTES, SweepPixels
from .run import Job, check_options, evaluate

log = logging.getLogger("compclip.eval")

LIST_SUFFIX = ".txt"  # --model FILE.txt: a list of models, where a weights or config file would have another suffix


def model_names(given: str) -> list[str]:
    """The models `--model` names: a `.txt` file's lines, else the comma-separated names; each once."""
    path = Path(given)
    if given.endswith(LIST_SUFFIX) and path.is_file():
        names = [line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines()]
        where = f"{path}: "
    else:
        names, where = given.split(","), "--model: "
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise UsageError(f"{where}no model named")
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise UsageError(f"{where}{twice} is named twice")
    return names


def folder_name(model: str) -> str:
    """A model's results folder under --out: its name with each run of characters other than letters, digits and
    `._+-` as one `_` (`hf-hub:timm/ViT-B-16-SigLIP` → `hf-hub_timm_ViT-B-16-SigLIP`, a registry id as it is)."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", model.strip().rstrip("/")).strip("_") or "model"


def is_sweep(cfg: EvalConfig) -> bool:
    """Whether `--model` names several models (or a list file), or `--part` splits them: results go into OUT/<name>/."""
    return cfg.part is not None or len(model_names(cfg.model)) > 1 or cfg.model.endswith(LIST_SUFFIX)


def finished(folder: Path, jobs: list[Job]) -> bool:
    """Whether `folder` holds a complete result of every job: a stopped or partial run's model is scored again."""
    for job in jobs:
        try:
            record = json.loads((folder / job.file).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return False
        if not (isinstance(record, dict) and record.get("complete")):
            return False
    return True


def sweep(cfg: EvalConfig, memory_bytes: int = MEMORY_BYTES) -> dict[str, dict[str, dict[str, Any]]]:
    """Score this part's models one after another, each into OUT/<folder_name>/, those finished skipped, the images
    each decodes kept for the next ones (`memory_bytes` of them in memory, the rest in a scratch folder under OUT);
    returns `{model: {benchmark: record}}` for the models scored here."""
    names = model_names(cfg.model)
    if cfg.pretrained is not None:
        raise UsageError(f"--pretrained names one model's weights, and --model names {len(names)}: give each as a name that "
                         "carries its weights (a registry id, a checkpoint folder, hf-hub:ORG/NAME)")
    folders = {name: Path(cfg.out) / folder_name(name) for name in names}
    clash = next(((a, b) for i, a in enumerate(names) for b in names[:i] if folders[a] == folders[b]), None)
    if clash:
        raise UsageError(f"--model: {clash[1]} and {clash[0]} would share the results folder {folders[clash[0]]}")
    jobs, _, _ = check_options(cfg)
    i, n = parse_part(cfg.part, what="the models")
    mine = [name for k, name in enumerate(names) if k % n == i]
    log.info("scoring %d of the %d models (part %d/%d) into %s", len(mine), len(names), i, n, cfg.out)
    todo = []
    for name in mine:
        if finished(folders[name], jobs):
            log.warning("%s: every benchmark's result is in %s already: skipped", name, folders[name])
        else:
            todo.append(name)
    done = {}
    with scratch_dir(Path(cfg.out) / "pixels") as folder:
        pixels = SweepPixels(folder, memory_bytes)
        for k, name in enumerate(todo):
            pixels.keeping = k < len(todo) - 1  # the last model keeps nothing: none follows it
            done[name] = evaluate(dataclasses.replace(cfg, model=name, out=str(folders[name]), part=None), pixels)
        if len(todo) > 1:
            log.info("decoded images kept for the sweep's models: %s", pixels.summary())
    return done
