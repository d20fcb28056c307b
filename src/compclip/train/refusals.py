"""Refusals before a run spends its steps: settings under which it would learn nothing, a resume under other options or
other data, data that gives no batch. Each is one line naming the option that fixes it."""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch

from ..data.readers import bad_records, field_kind, neighbour_outside
from ..errors import DataError, UsageError
from ..models.checkpoint import read_config
from .config import PATH_OPTIONS, RECIPE_ACCUMULATION_LIMIT, TrainConfig, absolute_path, global_batch
from .run_folder import changed_options, extends

log = logging.getLogger("compclip.train")


def refuse_what_cannot_learn(cfg: TrainConfig, model: torch.nn.Module, method: torch.nn.Module, world_size: int) -> None:
    """A step without a negative, or both towers frozen with nothing else to train, is refused; a warm-up that never
    ends is said once."""
    per_step = cfg.batch_size * cfg.accum_freq * world_size
    if per_step < 2:
        raise UsageError(f"a step of {per_step} image (--batch-size {cfg.batch_size} on {world_size} process(es)) has no "
                         "negative to contrast with: give at least 2")
    learning = [n for n, p in model.named_parameters() if p.requires_grad and n not in ("logit_scale", "logit_bias")]
    if not learning and not any(p.requires_grad for p in method.parameters()):
        raise UsageError(f"--lock-image and --lock-text freeze both towers, and method {cfg.method} owns no module: only the "
                         "temperature would train; unlock a tower (or --lock-image-unlocked-groups N)")
    if cfg.warmup >= cfg.steps:
        log.warning("--warmup %d is not shorter than the run's %d steps: the learning rate never reaches --lr %g", cfg.warmup,
                    cfg.steps, cfg.lr)


def refuse_long_accumulation(cfg: TrainConfig, world_size: int) -> None:
    """A recipe's global batch reached from a small --batch-size by more than `RECIPE_ACCUMULATION_LIMIT` micro-batches
    a step, not asked for (`accept_accum`), is refused before a model is built: such a step runs as many forward and
    backward passes before its one update, and a first step that lasts many minutes would otherwise say nothing."""
    if cfg.recipe is None or cfg.global_batch_size is None or cfg.accept_accum or cfg.accum_freq <= RECIPE_ACCUMULATION_LIMIT:
        return
    within = cfg.batch_size * world_size * RECIPE_ACCUMULATION_LIMIT
    raise UsageError(f"--recipe {cfg.recipe}: {global_batch(cfg, world_size)}: more than {RECIPE_ACCUMULATION_LIMIT} micro-batches, "
                     f"each step {cfg.accum_freq} forward and backward passes before its update; keep the paper's batch knowingly "
                     f"with --global-batch-size {cfg.global_batch_size} (or --accept-accum), or choose a smaller one "
                     f"(--global-batch-size {within}: {RECIPE_ACCUMULATION_LIMIT} micro-batches) or a larger --batch-size")


def refuse_another_run(cfg: TrainConfig, folder: Path | None, data_files: dict[str, Any] | None) -> dict[str, Any] | None:
    """A run resumes only under the options and data that made it (`folder`: its checkpoint); another run's are refused
    before anything is built. More steps extend it: returned as `{"at_step", "steps": [then, now]}`, and said."""
    if folder is None:
        return None
    config = read_config(folder)
    saved = config.get("train_args", {})
    # a run saved before paths were recorded resolved: its strings, from here, as it was compared then
    saved |= {k: absolute_path(saved[k]) for k in PATH_OPTIONS if isinstance(saved.get(k), str)}
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING}
    defaults["image_view"] = "train"  # a run saved before --image-view trained every method on open_clip's training view
    changes = changed_options(saved, dataclasses.asdict(cfg), defaults)
    before = config.get("train_data_files") or {}
    now_files = data_files or {}  # a run of an older compclip recorded no sha256 or images: what it recorded is compared
    differ = {k for k in before.keys() & now_files.keys() if before[k] != now_files[k]}
    if differ == {"images_sha256"}:
        changes.append(f"--train-data {cfg.train_data} is the same file, but the images it names are not ({before['images_hashed']:,} "
                       "of them hashed, spread through it: replaced under the same names)")
    elif differ:
        then, now = (f"{d['files']:,} file{'s' * (d['files'] != 1)} of {d['bytes']:,} bytes" for d in (before, data_files))
        edited = " (their contents differ: edited in place)" if then == now else ""
        changes.append(f"--train-data {cfg.train_data} names other files now ({then} then, {now} now){edited}")
    if changes:
        raise UsageError(f"--out {cfg.out} holds a run made with other options ({'; '.join(changes)}): resume it with its own "
                         f"options, or start a second stage from its weights: --model {folder} --out ANOTHER_FOLDER")
    if not extends(saved, dataclasses.asdict(cfg)):
        return None
    at = config.get("step")
    log.warning("extending %s from %d to %d steps at step %s%s", cfg.out, saved["steps"], cfg.steps, at,
                f": the {cfg.schedule} schedule now ends at step {cfg.steps}" if cfg.schedule != "const" else "")
    return {"at_step": at, "steps": [saved["steps"], cfg.steps]}


def refuse_neighbours_outside(reader) -> None:
    """A record's neighbour (NegCLIP's `neighbours`, record indices of the same data) that names no record of it is
    refused before step 1, in the reader's own line naming the record: drawn, it would stop the run at whatever step
    first draws it, checkpoints already written. Every record is read on every rank, so that all refuse together."""
    key = next((key for name, key in reader.fields.items() if field_kind(name) == "records"), None)
    if key is None or not reader.random_access:  # none declared; shards, which `check_partners` refuses
        return
    total = reader.num_records()
    for index in range(total):
        where, _, _, extra = reader.record_at(index)
        listed = (extra or {}).get("neighbours")
        if bad_records(listed) is None:  # a value that is no list of indices is the reader's to skip as a bad record
            outside = next((n for n in listed if not 0 <= n < total), None)
            if outside is not None:
                raise DataError(neighbour_outside(where, key, outside, reader.name, total))


def nothing_to_train_on(reader, cfg: TrainConfig) -> str:
    """Why an epoch gave no full batch, with the option that fixes the commonest cause: images not found."""
    stats = reader.stats()
    text = f"{reader.skips.summary()}: no full batch of {cfg.batch_size} in an epoch"
    missing = reader.first_missing_image() if stats["missing_image"] else None
    if missing is not None:
        where, path = missing
        text += (f"; the first missing image is {path} ({where}): images are looked up relative to the data "
                 "file's folder and its images/ subfolder, or to --image-root")
    elif stats["read"] and cfg.workers > 1 and stats["read"] >= cfg.batch_size:
        text += (f"; the {stats['read']} samples are split among the {cfg.workers} DataLoader workers, each making its own "
                 f"batches from about {stats['read'] // cfg.workers}, fewer than --batch-size {cfg.batch_size}: "
                 "lower --workers (or --batch-size)")
    elif stats["read"]:
        text += "; lower --batch-size"
    return text
