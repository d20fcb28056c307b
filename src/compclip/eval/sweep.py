"""Many models, one command: `compclip eval --model a,b,c` (or a `.txt` file of names, one a line, `#` starting a
comment) scores each model into its own folder, `OUT/<name>/`, which `compclip report` and `compare` take as they take
any results folder. Every name is checked before the first model loads; a model that cannot be loaded then (its weights
absent, a folder without a checkpoint) is one line, and the others are scored (`--fail-fast`: the first one stops the
sweep). A result already whole is kept, so a sweep stopped part-way goes on where it stopped; an incomplete one (images
missing) is scored again only once some of what it lacked is there. The list splits across the tasks of a SLURM job
array (or `--part i/n`), model k going to part k mod n, as `compclip concepts` splits its captions, and again across
torchrun's ranks. Each benchmark's images are decoded once for the models of one preprocessing (`pixels`), their scores
the same as each model's alone."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import Any

from ..errors import CompclipError, StorageError, UsageError
from ..io import scratch_dir
from ..parts import parse_part, rank_part
from .base import REGISTRY
from .config import EvalConfig
from .pixels import MEMORY_BYTES, SweepPixels
from .run import Job, check_options, evaluate

log = logging.getLogger("compclip.eval")

LIST_SUFFIX = ".txt"  # --model FILE.txt: a list of models, where a weights or config file would have another suffix


def listed_models(given: str) -> dict[str, str]:
    """The models `--model` names, each once, with where it is named (`models.txt line 4`, `--model`): a `.txt` file's
    lines, else the comma-separated names."""
    path = Path(given)
    if given.endswith(LIST_SUFFIX) and path.is_file():
        lines = [line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines()]
        named = [(name, f"{path} line {k}") for k, name in enumerate(lines, 1)]
        where = f"{path}: "
    else:
        named, where = [(name.strip(), "--model") for name in given.split(",")], "--model: "
    named = [(name, place) for name, place in named if name]
    if not named:
        raise UsageError(f"{where}no model named")
    places: dict[str, str] = {}
    for name, place in named:
        if name in places:
            raise UsageError(f"{where}{name} is named twice")
        places[name] = place
    return places


def model_names(given: str) -> list[str]:
    """The models `--model` names: a `.txt` file's lines, else the comma-separated names; each once."""
    return list(listed_models(given))


def folder_name(model: str) -> str:
    """A model's results folder under --out: its name with each run of characters other than letters, digits and
    `._+-` as one `_` (`hf-hub:timm/ViT-B-16-SigLIP` → `hf-hub_timm_ViT-B-16-SigLIP`, a registry id as it is)."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", model.strip().rstrip("/")).strip("_") or "model"


def is_sweep(cfg: EvalConfig) -> bool:
    """Whether `--model` names several models (or a list file), or `--part` splits them: results go into OUT/<name>/."""
    return cfg.part is not None or len(model_names(cfg.model)) > 1 or cfg.model.endswith(LIST_SUFFIX)


def check_names(places: dict[str, str]) -> None:
    """Each name checked before any model loads, so that a mistyped one costs no model's scoring: a name that is no folder
    or file here, no registry id and no `ORG:`-prefixed id must be an open_clip architecture, else it is refused with the
    closest names of open_clip's and the registry's. What only loading tells (weights absent) is each model's own line."""
    from ..models.factory import model_config
    from ..models.released import is_released

    wrong = []
    for name, place in places.items():
        if ":" in name or Path(name).exists() or is_released(name):
            continue
        try:
            model_config(name)
        except CompclipError as e:
            wrong.append(f"{place}: {e}")
    if wrong:
        raise UsageError(f"{'; '.join(wrong)}; no model scored ({len(wrong)} of the {len(places)} names are wrong)")


@dataclasses.dataclass
class SweepOutcome:
    """What a sweep (or this task's part of one) did with each of its models, in the list's order: `scored`
    `{model: {benchmark: record}}` for the benchmarks scored here, `kept` `{model: {benchmark: why}}` for the results
    left as they were, `failed` `{model: why}` for the models that could not be scored."""

    models: list[str]
    part: tuple[int, int]
    listed: int
    scored: dict[str, dict[str, dict[str, Any]]] = dataclasses.field(default_factory=dict)
    kept: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)

    def rows(self) -> list[tuple[str, str, str]]:
        """(model, scored / skipped / failed, why) for the summary: a model scored here names its benchmarks."""
        rows = []
        for model in self.models:
            if model in self.failed:
                rows.append((model, "failed", self.failed[model]))
            elif model in self.scored:
                kept = f"; kept {', '.join(self.kept[model])}" if self.kept.get(model) else ""
                rows.append((model, "scored", ", ".join(self.scored[model]) + kept))
            else:
                rows.append((model, "skipped", "; ".join(f"{label}: {why}" for label, why in self.kept.get(model, {}).items())))
        return rows


def kept(folder: Path, job: Job, root: Path, cfg: EvalConfig, options: Any) -> str | None:
    """Why the result of `job` in `folder` is kept as it is, or None where it is to be scored: a result is kept when it
    is whole (its JSON and items both written, under the same tie rule and benchmark options), or when it is incomplete
    and nothing of what it lacked has appeared since (an image still missing: SVO-Probes' dead links are so for good).
    An incomplete result whose data has come is said so, and scored again."""
    file = folder / job.file
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None  # not there, or cut short: scored
    if not isinstance(record, dict) or "metrics" not in record:
        return None
    same = (record.get("ties_option") == cfg.ties and record.get("options") == json.loads(json.dumps(dataclasses.asdict(options)))
            and (not cfg.blind or "blind" in record or record.get("lacks")))
    if not same or not (record.get("lacks") or (folder / job.items_file).is_file()):
        return None
    if record.get("complete"):
        return f"whole in {file}"
    came = appeared(record, file, root, job)
    if came is None:
        return f"incomplete in {file}, and none of what it lacks has appeared since ({lacking(record)}): kept"
    log.warning("%s: %s: incomplete in %s, and %s: scored again", folder.name, job.label, file, came)
    return None


def appeared(record: dict[str, Any], file: Path, root: Path, job: Job) -> str | None:
    """What of an incomplete result's missing data is there now (an image file that was not, one replaced since it failed
    to decode, an absent file of the benchmark's, the benchmark's files where it could not run), or None."""
    if record.get("lacks"):
        return None if REGISTRY[job.name].lacks(root, job.splits) else "the benchmark's files are there now"
    written = file.stat().st_mtime
    missing = record.get("missing_files")
    if missing is None and record.get("missing_images", {}).get("count"):
        return "its result does not name every image it lacked"
    came = [k for k, why in (missing or {}).items() if Path(k).is_file() and (why == "not found" or Path(k).stat().st_mtime > written)]
    absent = [k for k in record.get("absent") or {} if Path(k).exists()]
    said = ([f"{len(came)} of its {len(missing)} missing images are there now"] if came else []) + \
        ([f"{len(absent)} of its absent files are there now"] if absent else [])
    if not said and not missing and not record.get("absent"):
        return "it does not say what it lacks"
    return " and ".join(said) or None


def lacking(record: dict[str, Any]) -> str:
    """What an incomplete result lacks, in a few words."""
    if record.get("lacks"):
        return record["lacks"]
    count = record.get("missing_images", {}).get("count", 0)
    absent = [f"{part} {why}" for part, why in (record.get("absent") or {}).items()]
    return ", ".join(([f"{count} images missing"] if count else []) + absent)


@contextlib.contextmanager
def removed_if_left_empty(out: Path):
    """--out, where the sweep made it, removed again when nothing was written into it (every model failed, or a name
    was refused): `compclip report results/*` then meets no empty folder."""
    made = not out.exists()
    try:
        yield
    finally:
        if made and out.is_dir() and not any(out.iterdir()):
            out.rmdir()


def sweep(cfg: EvalConfig, memory_bytes: int = MEMORY_BYTES) -> SweepOutcome:
    """Score this part's models one after another, each into OUT/<folder_name>/, the results already whole kept, the
    images each decodes kept for the next ones (`memory_bytes` of them in memory, the rest in a scratch folder under OUT).
    A model that cannot be loaded or scored is one line and the next is scored (`cfg.fail_fast`: raised); a full disk
    stops the sweep, as it would every model after it."""
    places = listed_models(cfg.model)
    names = list(places)
    if cfg.pretrained is not None:
        raise UsageError(f"--pretrained names one model's weights, and --model names {len(names)}: give each as a name that "
                         "carries its weights (a registry id, a checkpoint folder, hf-hub:ORG/NAME)")
    folders = {name: Path(cfg.out) / folder_name(name) for name in names}
    clash = next(((a, b) for i, a in enumerate(names) for b in names[:i] if folders[a] == folders[b]), None)
    if clash:
        raise UsageError(f"--model: {clash[1]} and {clash[0]} would share the results folder {folders[clash[0]]}")
    i, n = rank_part(parse_part(cfg.part, what="the models"))
    check_names(places)
    with removed_if_left_empty(Path(cfg.out)):
        jobs, root, options = check_options(cfg)
        outcome = SweepOutcome([name for k, name in enumerate(names) if k % n == i], (i, n), len(names))
        log.info("scoring %d of the %d models (part %d/%d) into %s", len(outcome.models), len(names), i, n, cfg.out)
        todo = {}
        for name in outcome.models:
            for job in jobs:
                why = kept(folders[name], job, root, cfg, options[job.name])
                if why is None:
                    todo.setdefault(name, []).append(job.label)
                else:
                    outcome.kept.setdefault(name, {})[job.label] = why
                    log.warning("%s: %s: %s: skipped", name, job.label, why)
        with scratch_dir(Path(cfg.out) / "pixels") as folder:
            pixels = SweepPixels(folder, memory_bytes)
            for k, (name, labels) in enumerate(todo.items()):
                pixels.keeping = k < len(todo) - 1  # the last model keeps nothing: none follows it
                one = dataclasses.replace(cfg, model=name, benchmark=",".join(labels), out=str(folders[name]), part=None)
                try:
                    outcome.scored[name] = evaluate(one, pixels)
                except StorageError:
                    raise
                except CompclipError as e:
                    if cfg.fail_fast:
                        raise
                    outcome.failed[name] = str(e)
                    log.error("%s: not scored: %s", name, e)
            if len(todo) > 1:
                log.info("decoded images kept for the sweep's models: %s", pixels.summary())
    return outcome
