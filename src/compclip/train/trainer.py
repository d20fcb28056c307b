"""`compclip train`: fine-tune an open_clip model with a registered method, on one process or many.

Checkpoints use the model folder format of `compclip.models` plus `training_state.pt`
(optimizer, scheduler, RNG states and every rank's data position), written atomically every
`save_every` steps; a run started again in the same `--out` resumes exactly where the last
checkpoint left off. Logs go to `log.jsonl` and TensorBoard on rank 0.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import math
import multiprocessing
import os
import pickle
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .. import stops
from ..data import ArrayReader, WebDatasetReader, data_files, is_tar_shards, open_reader
from ..data.augment import BatchedView
from ..data.shared_memory import check_shared_memory
from ..errors import DataError, MissingFileError, NonFiniteError, PeerLost, Preempted, StorageError, UsageError
from ..io import atomic_path, open_own, write_json
from ..models import image_bytes
from ..models.checkpoint import CONFIG_NAME, MODULES_NAME, STATE_NAME, first_nonfinite, load_module_weights, read_config, remove_checkpoint
from ..precision import autocast, input_dtype, weights_precision
from ..progress import progress
from .config import PATH_OPTIONS, TrainConfig, reader_kwargs, resolved
from .distributed import DistEnv, init_distributed, leave
from .evaluation import BEST_NAME, RunEvaluation, keep_if_best
from .reporting import Reporters
from .run_folder import RunLock, changed_options, latest_checkpoint
from .step import loss_step

log = logging.getLogger("compclip.train")


def _lr_lambda(cfg: TrainConfig) -> Callable[[int], float]:
    """The rate of each step as a share of --lr: linear warm-up from --warmup-lr, then constant or cosine down to --min-lr
    (open_clip's schedule where both are 0)."""
    start, floor = cfg.warmup_lr / cfg.lr, cfg.min_lr / cfg.lr

    def factor(step: int) -> float:
        if step < cfg.warmup:
            return start + (1 - start) * (step + 1) / cfg.warmup
        if cfg.schedule == "const":
            return 1.0
        progress_ = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress_)))

    return factor


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """open_clip's split: no weight decay on gains, biases, embeddings' scalars and logit scale/bias."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        exclude = p.ndim < 2 or "bn" in name or "ln" in name or "bias" in name or "logit_scale" in name
        (no_decay if exclude else decay).append(p)
    return [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": weight_decay}]


def _optimizer(cfg: TrainConfig, model: torch.nn.Module, method) -> torch.optim.Optimizer:
    """One of OPTIMIZERS (`TrainConfig.validate` has checked the name), over the model and the method's own modules."""
    groups = _param_groups(model, cfg.weight_decay) + method.param_groups(cfg.lr, cfg.weight_decay)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr)
    # adam: weight decay as L2 in the gradient, as torch's Adam does it; adamw: decoupled. Fused (one kernel over all
    # parameters, on CPU and GPU) where every parameter is a float on one of those: 7x faster than the per-tensor loop
    # for the binding world's small models on a CPU.
    adam = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    params = [p for g in groups for p in g["params"]]
    fused = all(p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.float16, torch.bfloat16) for p in params)
    return adam(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, fused=fused or None)


# gloo's and NCCL's own words for a collective that broke off or timed out, with or without their source location
# ("[.../gloo/transport/tcp/pair.cc:545] Read error ..."): gloo/transport/tcp/unbound_buffer.cc raises "Timed out waiting
# Nms for recv operation to complete" in the operation that timed out and "Application timeout caused pair closure" in
# every other one then pending, as DDP's gradient buckets are
COLLECTIVE_FAILURES = ("gloo", "NCCL", "ProcessGroup", "Timed out waiting", "Application timeout caused pair closure",
                       "Connection closed by peer", "Connection reset by peer")


def _collective_failed(e: RuntimeError) -> bool:
    """A collective that broke off or timed out: torch's DistError, or gloo's and NCCL's own RuntimeErrors."""
    return isinstance(e, dist.DistError) or any(words in str(e) for words in COLLECTIVE_FAILURES)


def _first_line(e: Exception) -> str:
    """An error's first sentence without the library's source location: "Read error [127.0.0.1]:5858: Connection reset by
    peer" of gloo's "[.../pair.cc:545] Read error [127.0.0.1]:5858: Connection reset by peer. This is typically ..."."""
    line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    line = line.split("] ", 1)[1] if line.startswith("[") and "] " in line else line
    return line.split(". ", 1)[0]




def _worker_stop_signals(stopping, _worker: int) -> None:
    """In a DataLoader worker: a stop signal sent to the whole process group is the trainer's to answer, at a step boundary
    (a worker that died of it first would end the run in a traceback). The trainer raises `stopping` when it gets one; a
    SIGTERM it did not get is DataLoader's own way of ending a worker, which then ends as it would have."""
    def on_signal(signum, _frame):
        for _ in range(80):  # the group's signal reaches the trainer at about the same moment
            if stopping.value:
                return
            time.sleep(0.025)
        os._exit(0)  # asked by the loader or at exit: end without a death by signal, which the trainer would report

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # only a cluster sends it


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": list(np.random.get_state()), "python": random.getstate()}
    state["numpy"][1] = torch.from_numpy(state["numpy"][1].astype(np.int64))
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), *rest))
    random.setstate(tuple(tuple(x) if isinstance(x, list) else x for x in state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class DataPosition:
    """Which micro-batches were consumed: epoch, count, and per-shard record positions."""

    def __init__(self, epoch: int = 0, batches: int = 0, positions: dict[int, int] | None = None):
        self.epoch, self.batches, self.positions = epoch, batches, dict(positions or {})

    def consumed(self, batch: dict[str, Any]) -> None:
        self.batches += 1
        for shard in set(batch["shard"].tolist()):
            mask = batch["shard"] == shard
            self.positions[shard] = int(batch["pos"][mask].max()) + 1

    def new_epoch(self) -> None:
        self.epoch, self.batches, self.positions = self.epoch + 1, 0, {}

    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "batches": self.batches, "positions": self.positions}


class Trainer:
    def __init__(self, cfg: TrainConfig, eval_hook: Callable[[torch.nn.Module, int], dict[str, float]] | None = None):
        cfg.validate()
        cfg.resolve_paths()
        self.cfg = cfg
        self.env: DistEnv = init_distributed(cfg.device, cfg.dist_timeout)
        try:
            self._set_up(eval_hook)
        except BaseException:  # a refusal on every rank: leave the group as a finished run does
            leave(self.env)
            raise

    def _set_up(self, eval_hook: Callable[[torch.nn.Module, int], dict[str, float]] | None) -> None:
        from ..concepts import ConceptStore
        from ..methods import build_method
        from ..models import load_model, train_preprocess

        cfg = self.cfg
        self.out = Path(cfg.out)
        cfg.resolve_length(self.env.world_size, lambda: open_reader(cfg.train_data, **self._reader_kwargs()).num_records())
        self.data_files = data_files(cfg.train_data)  # what a resume compares beside the options
        self.resume_from = self._resume_folder()
        self._check_same_run()  # reads OUT only: writing waits for `run` to own it
        concepts = ConceptStore(cfg.concepts) if cfg.concepts else self._carried_concepts()
        self.method = build_method(cfg.method, concepts=concepts, seed=cfg.seed, **cfg.method_options)
        if concepts is None and self.method.uses_concepts:
            raise UsageError(f"method {cfg.method} trains on concepts: pass --concepts DIR (from `compclip concepts`), "
                             "or train on shards that carry them (`compclip concepts SHARDS --into-shards DIR`)")
        torch.manual_seed(cfg.seed)  # the model's initialisation, where it is built from scratch, then the method's modules
        model, _, self.tokenizer = load_model(cfg.model, cfg.pretrained, device=self.env.device, init_seed=None,
                                              precision=weights_precision(cfg.precision), **self._forced())
        self.method.bind(model)  # the method's own modules, sized by the model (seeded like it)
        if (Path(cfg.model) / MODULES_NAME).is_file() and read_config(cfg.model).get("method") == cfg.method:
            load_module_weights(self.method, cfg.model)  # a checkpoint of this method goes on with the modules it trained
        if cfg.lock_image or self.method.locks_image:
            model.lock_image_tower(unlocked_groups=cfg.lock_image_unlocked_groups)
        if cfg.lock_text:
            model.lock_text_tower()
        if getattr(model, "logit_bias", None) is not None and not self.method.uses_logit_bias:
            model.logit_bias.requires_grad_(False)  # a softmax loss never reads it, and DDP wants every trained parameter used
        self._refuse_what_cannot_learn(model)
        if cfg.grad_checkpointing:
            model.set_grad_checkpointing(True)
        self.model = model.train()
        self.module = _TrainModule(model, self.method)
        if self.env.distributed:
            ids = [self.env.device.index] if self.env.device.type == "cuda" else None
            self.module = DistributedDataParallel(self.module, device_ids=ids)
        if cfg.torchcompile:
            compile_blocks(model)
        self.optimizer = _optimizer(cfg, model, self.method)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, _lr_lambda(cfg))
        # on the run's own device: torch's default, CUDA's, turns itself off on a CPU, and fp16 then trains unscaled
        self.scaler = torch.amp.GradScaler(self.env.device.type, enabled=cfg.precision == "amp")
        transform = self.method.image_transform(model)
        self.reader = open_reader(cfg.train_data, transform=transform or train_preprocess(model), **self._reader_kwargs())
        # decoded arrays take open_clip's training view per batch, bit for bit the same (`BatchedView`)
        self.view = BatchedView.of(self.reader.transform) if transform is None and isinstance(self.reader, ArrayReader) else None
        if self.view is not None:
            self.reader.transform = self.view
        self.reader.admit = self.method.admits
        if self.method.wants_partners and not self.reader.random_access:
            self.reader.record_at(0)  # raises the reader's own reason, before a DataLoader worker would
        self.reader.partners = self.method.wants_partners
        # without --train-num-samples, an epoch of resampled shards is the whole run (its steps' samples, every process's)
        whole_run = cfg.steps * cfg.batch_size * cfg.accum_freq * self.env.world_size
        self.reader.resampled = (cfg.train_num_samples or whole_run) if cfg.dataset_resampled else 0
        self.evaluation = RunEvaluation(cfg, self.method, self.tokenizer, self.env.device, self.env.is_main, eval_hook)
        self.step, self.data = 0, DataPosition()
        self._stop_flag = multiprocessing.Value("b", 0)  # raised when this process gets a stop signal; its DataLoader workers read it
        self._resume()

    def _forced(self) -> dict[str, Any]:
        """open_clip's --force-* overrides of the architecture, as `load_model` takes them (a checkpoint folder has its own)."""
        cfg = self.cfg
        forced = {name: getattr(cfg, name) for name in ("force_quick_gelu", "force_context_length", "force_image_size",
                                                         "force_patch_dropout", "force_custom_text")}
        return {k: v for k, v in forced.items() if v not in (None, False)}

    def _carried_concepts(self) -> Any:
        """Shards from `compclip concepts --into-shards` carry each sample's record: no store is needed."""
        from ..concepts import SampleConcepts

        if not is_tar_shards(self.cfg.train_data):
            return None
        fields = WebDatasetReader(self.cfg.train_data, caption_field=self.cfg.caption_key).concept_fields()
        return SampleConcepts(fields, self.cfg.train_data) if fields else None

    def _reader_kwargs(self) -> dict[str, Any]:
        return reader_kwargs(self.cfg, self.cfg.train_data, self.cfg.image_root)

    # -- data -------------------------------------------------------------------------
    def _loader(self) -> torch.utils.data.DataLoader:
        """One loader for the whole run: its workers persist across epochs, the reader moving itself on."""
        self.reader.resume_positions = dict(self.data.positions)
        self.reader.worker_rotation = self.data.batches % max(1, self.cfg.workers)
        self.reader.sample_seed, self.reader.epoch, self.reader.shuffle = self.cfg.seed * 1000, self.data.epoch, self.cfg.shuffle
        check_shared_memory(self.cfg.workers, self.cfg.batch_size * image_bytes(self.model), f"batches of {self.cfg.batch_size} images")
        return torch.utils.data.DataLoader(
            self.reader,
            batch_size=self.cfg.batch_size,
            num_workers=self.cfg.workers,
            collate_fn=_Collate(self.method, self.tokenizer, self.view),
            drop_last=True,
            pin_memory=self.env.device.type == "cuda",
            persistent_workers=self.cfg.workers > 0,
            worker_init_fn=functools.partial(_worker_stop_signals, self._stop_flag),
        )

    def _batches(self) -> Iterator[dict[str, Any]]:
        """Micro-batches forever, epoch after epoch, recording the data position of each; closing it ends the loader's
        workers."""
        loader = self._loader()
        try:
            yield from self._epochs(loader)
        finally:
            workers = getattr(loader, "_iterator", None)  # persistent workers live on the loader until it is shut down
            if workers is not None:
                workers._shutdown_workers()

    def _epochs(self, loader: torch.utils.data.DataLoader) -> Iterator[dict[str, Any]]:
        images_in = input_dtype(self.cfg.precision)  # 16-bit weights take 16-bit images (four-dimensional tensors)
        while True:
            empty, resumed = True, bool(self.data.positions)  # a run resumed at the end of an epoch finds it empty
            for batch in loader:
                empty = False
                self.data.consumed(batch)
                yield {k: v.to(self.env.device, dtype=images_in if v.ndim == 4 and v.is_floating_point() else None, non_blocking=True)
                       if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            if empty and not resumed:
                raise DataError(self._nothing_to_train_on())
            self.reader.skips.log_summary()
            self.data.new_epoch()

    def _nothing_to_train_on(self) -> str:
        """Why an epoch gave no full batch, with the option that fixes the commonest cause: images not found."""
        stats = self.reader.stats()
        text = f"{self.reader.skips.summary()}: no full batch of {self.cfg.batch_size} in an epoch"
        missing = self.reader.first_missing_image() if stats["missing_image"] else None
        if missing is not None:
            where, path = missing
            text += (f"; the first missing image is {path} ({where}): images are looked up relative to the data "
                     "file's folder and its images/ subfolder, or to --image-root")
        elif stats["read"] and self.cfg.workers > 1 and stats["read"] >= self.cfg.batch_size:
            text += (f"; the {stats['read']} samples are split among the {self.cfg.workers} DataLoader workers, each making its own "
                     f"batches from about {stats['read'] // self.cfg.workers}, fewer than --batch-size {self.cfg.batch_size}: "
                     "lower --workers (or --batch-size)")
        elif stats["read"]:
            text += "; lower --batch-size"
        return text

    # -- checkpoints ------------------------------------------------------------------
    def _gather_objects(self, obj: Any) -> list[Any]:
        if not self.env.distributed:
            return [obj]
        objs: list[Any] = [None] * self.env.world_size
        dist.all_gather_object(objs, obj)
        return objs

    def save(self) -> None:
        bad = first_nonfinite(self.model.state_dict())  # never a checkpoint that cannot be used
        if bad is not None:
            raise NonFiniteError(f"step {self.step}: weight {bad} holds NaN or inf: not saved, training stopped (checkpoints "
                                 f"under {self.out / 'checkpoints'} are untouched). Lower --lr")
        ranks = self._gather_objects({"rng": _rng_state(), "data": self.data.state()})
        if self.env.is_main:
            state = {
                "step": self.step,
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(),
                "ranks": ranks,
            }
            folder = self.out / "checkpoints" / f"step_{self.step:07d}"
            try:
                self._write_model(folder, state=state)
            except StorageError as e:
                raise StorageError(f"{e}: training stopped at step {self.step}; the checkpoints before it are untouched: make room "
                                   "and run the same command to resume") from None
            with atomic_path(self.out / "checkpoints" / "latest") as tmp:
                tmp.write_text(folder.name)
            for old in sorted((self.out / "checkpoints").glob("step_*"))[: -max(1, self.cfg.keep)]:
                if (old / CONFIG_NAME).exists():  # a folder rotation has already emptied of its own files is left alone
                    foreign = remove_checkpoint(old)
                    if foreign:
                        log.warning("--keep %d: removed the checkpoint files of %s, kept the folder for what else it holds (%s)",
                                    self.cfg.keep, old, ", ".join(foreign))
        if self.env.distributed:
            dist.barrier()

    def _resume_folder(self) -> Path | None:
        """The checkpoint this run goes on from: --resume's folder, else the newest in OUT (None: a new run)."""
        if self.cfg.resume is None:
            return latest_checkpoint(self.out)
        if self.cfg.resume == "latest":
            folder = latest_checkpoint(self.out)
            if folder is None:
                raise MissingFileError(f"--resume latest: {self.out / 'checkpoints'} holds no checkpoint to resume")
            return folder
        return Path(self.cfg.resume)

    def _refuse_what_cannot_learn(self, model: torch.nn.Module) -> None:
        """Settings under which a run would spend its steps learning nothing are refused before it starts, not found out
        from its losses; a warm-up that never ends is said once."""
        cfg = self.cfg
        per_step = cfg.batch_size * cfg.accum_freq * self.env.world_size
        if per_step < 2:
            raise UsageError(f"a step of {per_step} image (--batch-size {cfg.batch_size} on {self.env.world_size} process(es)) has no "
                             "negative to contrast with: give at least 2")
        learning = [n for n, p in model.named_parameters() if p.requires_grad and n not in ("logit_scale", "logit_bias")]
        if not learning and not any(p.requires_grad for p in self.method.parameters()):
            raise UsageError(f"--lock-image and --lock-text freeze both towers, and method {cfg.method} owns no module: only the "
                             "temperature would train; unlock a tower (or --lock-image-unlocked-groups N)")
        if cfg.warmup >= cfg.steps:
            log.warning("--warmup %d is not shorter than the run's %d steps: the learning rate never reaches --lr %g", cfg.warmup,
                        cfg.steps, cfg.lr)

    def _check_same_run(self) -> None:
        """A run resumes only under the options that made it; another run's are refused before anything is built."""
        folder = self.resume_from
        if folder is None:
            return
        saved = read_config(folder).get("train_args", {})
        # a run saved before paths were recorded resolved: its strings, from here, as it was compared then
        saved |= {k: resolved(saved[k]) for k in PATH_OPTIONS if isinstance(saved.get(k), str)}
        defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING}
        changes = changed_options(saved, dataclasses.asdict(self.cfg), defaults)
        before = read_config(folder).get("train_data_files")
        now_files = self.data_files or {}  # a run of an older compclip recorded no sha256: what it recorded is compared
        if before is not None and any(before[k] != now_files[k] for k in before.keys() & now_files.keys()):
            then, now = (f"{d['files']:,} file{'s' * (d['files'] != 1)} of {d['bytes']:,} bytes" for d in (before, self.data_files))
            edited = " (their contents differ: edited in place)" if then == now else ""
            changes.append(f"--train-data {self.cfg.train_data} names other files now ({then} then, {now} now){edited}")
        if changes:
            raise UsageError(f"--out {self.out} holds a run made with other options ({'; '.join(changes)}): resume it with its own "
                             f"options, or start a second stage from its weights: --model {folder} --out ANOTHER_FOLDER")

    def _resume(self) -> None:
        from ..models import load_weights

        folder = self.resume_from
        if folder is None:
            return
        try:
            state = torch.load(folder / STATE_NAME, map_location="cpu", weights_only=True)
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.scaler.load_state_dict(state["scaler"])
            ranks, step = state["ranks"], state["step"]
        except (RuntimeError, EOFError, OSError, KeyError, ValueError, pickle.UnpicklingError) as e:
            raise DataError(f"{folder / STATE_NAME}: damaged, cannot resume ({type(e).__name__}: {e}); "
                            f"{self._previous_complete(folder)}") from None
        if len(ranks) != self.env.world_size:
            raise UsageError(f"{folder} was written by {len(ranks)} processes, this run has {self.env.world_size}")
        load_weights(self.model, folder / "model.safetensors")
        load_module_weights(self.method, folder)
        mine = ranks[self.env.rank]
        _set_rng_state(mine["rng"])
        self.data = DataPosition(**mine["data"])
        self.step = step
        if self.env.is_main:
            log.info("resumed from %s at step %d", folder, self.step)

    def _previous_complete(self, damaged: Path) -> str:
        """Where to resume from instead of a damaged checkpoint."""
        folders = sorted((self.out / "checkpoints").glob("step_*"), reverse=True)
        earlier = [f for f in folders if f != damaged and (f / STATE_NAME).is_file()]
        if earlier:
            return (f"the previous checkpoint {earlier[0]} is complete: write {earlier[0].name} into {self.out / 'checkpoints' / 'latest'} "
                    "to resume from it")
        return f"no earlier checkpoint: remove {self.out / 'checkpoints'} to start the run again"

    def _keep_best(self, figures: dict[str, float]) -> None:
        """Rank 0: OUT/checkpoints/best becomes this step's model when its --keep-best figure is the best yet."""
        best = self.evaluation.best(figures) if self.env.is_main else None
        if best is None:
            return
        keep_if_best(self.out / "checkpoints" / BEST_NAME, *best, self.step, save=self._write_model)

    def _write_model(self, folder: Path, **extra: Any) -> None:
        """This step's model and method modules with the run's options and data: what a checkpoint and `best` both hold."""
        from ..models import save_checkpoint

        save_checkpoint(self.model, folder, modules=self.method.state_dict(), method=self.cfg.method, step=self.step,
                        train_args=dataclasses.asdict(self.cfg), train_data_files=self.data_files, **extra)

    # -- logging ----------------------------------------------------------------------
    def _truncate_log(self) -> None:
        """Drop log lines past the resumed step: they are about to be written again."""
        log = self.out / "log.jsonl"
        if log.is_file():
            lines = [line for line in log.read_text().splitlines() if line and json.loads(line).get("step", 0) <= self.step]
            with atomic_path(log) as tmp:
                tmp.write_text("".join(line + "\n" for line in lines))

    def _config_record(self) -> dict[str, Any]:
        """The run's options, and with a recipe its citation and each setting the run changed (`config.json`)."""
        record = dataclasses.asdict(self.cfg)
        if self.cfg.recipe is not None:
            from ..recipes import get_recipe

            recipe = get_recipe(self.cfg.recipe)
            record["recipe_record"] = {"name": recipe.name, "citation": recipe.citation, "overrides": recipe.overrides(record)}
        return record

    # -- the loop ---------------------------------------------------------------------
    def _autocast(self):
        return autocast(self.env.device, self.cfg.precision)

    def run(self) -> dict[str, float]:
        """Train to `steps`, owning OUT meanwhile (`RunLock`, rank 0). Nothing is written before the lock is held and the
        first step's data is read and checked; a new run that fails before that leaves no folder behind."""
        lock = RunLock(self.out).acquire() if self.env.is_main else None
        lost = False
        try:
            if self.env.is_main and self.step:
                self._truncate_log()
            with self._train_log(), self._stop_signals():
                return self._run()
        except PeerLost:
            lost = True  # ending a group with a rank gone could wait on it
            raise
        finally:
            if lock is not None:
                lock.release(keep_folder=(self.out / "config.json").exists())
            if not lost:
                leave(self.env)

    @contextlib.contextmanager
    def _stop_signals(self):
        """SIGTERM and SIGUSR1 ask the run to stop: it checkpoints at the next step boundary (`_stopping`) and raises
        `Preempted`. Outside the main thread (a caller's) signals stay as they are."""
        self._signal: int | None = None
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def note(signum, _frame):
            self._signal = signum
            self._stop_flag.value = 1

        previous = {sig: signal.signal(sig, note) for sig in stops.SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _stopping(self) -> int | None:
        """The stop signal any rank received (all ranks agree, so they stop at the same step), or None."""
        asked = self._signal or 0
        if self.env.distributed:
            flag = torch.tensor([asked], device=self.env.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            asked = int(flag.item())
        return asked or None

    @contextlib.contextmanager
    def _train_log(self):
        """compclip's log lines of the run (resume, concept coverage, skips, warnings) also go to OUT/train.log (rank 0)."""
        if not self.env.is_main:
            yield
            return
        stream = os.fdopen(open_own(self.out / "train.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a", encoding="utf-8")
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger = logging.getLogger("compclip")
        level = logger.level
        if level == logging.NOTSET or level > logging.INFO:  # the file holds the run's INFO lines, under --quiet too (the
            logger.setLevel(logging.INFO)                      # console's handler keeps the CLI's level)
        logger.addHandler(handler)
        try:
            yield
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
            stream.close()

    def _run(self) -> dict[str, float]:
        cfg = self.cfg
        steps = range(self.step, cfg.steps)
        if not steps:
            return {}
        batches = self._batches()
        try:
            return self._steps(steps, batches)
        except RuntimeError as e:
            if self.env.distributed and _collective_failed(e):
                latest = latest_checkpoint(self.out)
                kept = f"the last checkpoint is {latest}" if latest else "no checkpoint was written yet"
                raise PeerLost(f"rank {self.env.rank} of {self.env.world_size}: a collective with the other ranks failed at step "
                               f"{self.step + 1}, as when another rank died, or hung past --dist-timeout {self.cfg.dist_timeout} s "
                               f"({_first_line(e)}); {kept}: run the same command on every node to resume") from None
            raise
        finally:
            batches.close()

    def _steps(self, steps: range, batches: Iterator[dict[str, Any]]) -> dict[str, float]:
        cfg = self.cfg
        coverage = Coverage()
        first = [next(batches) for _ in range(cfg.accum_freq)]  # read and checked before anything is written
        if coverage.add(first):
            self._check_coverage(coverage)
        reporters = None
        if self.env.is_main:
            record = self._config_record()
            write_json(self.out / "config.json", record)
            reporters = Reporters(self.out, cfg.reporters, record, cfg.wandb_project_name)
        try:
            return self._loop(steps, batches, first, coverage, reporters)
        finally:
            if reporters is not None:
                reporters.close()

    def _loop(self, steps: range, batches: Iterator[dict[str, Any]], first: list[dict[str, Any]] | None, coverage: Coverage,
              reporters: Reporters | None) -> dict[str, float]:
        cfg = self.cfg
        per_step = cfg.batch_size * cfg.accum_freq * self.env.world_size
        bar = progress(steps, f"train {cfg.method} ({self.out.name})", total=len(steps), unit="step") if self.env.is_main else iter(steps)
        terms: dict[str, float] = {}
        skipped = 0
        for _ in bar:
            start = time.perf_counter()
            if first is None:
                micro = [next(batches) for _ in range(cfg.accum_freq)]
                coverage.add(micro)
            else:
                micro, first = first, None
            self.method.begin_step(self.step)
            self.optimizer.zero_grad(set_to_none=True)
            terms = loss_step(self.module, self.method, micro, self.env, self._autocast, self._backward)
            problem = self._nonfinite(terms)
            if problem is not None:
                skipped += 1
                if skipped > cfg.skip_nonfinite:
                    raise NonFiniteError(f"step {self.step + 1}: {problem}: training stopped before the update (checkpoints under "
                                         f"{self.out / 'checkpoints'} are untouched). Lower --lr, or let --skip-nonfinite N skip "
                                         "up to N such steps")
                log.warning("step %d: %s: skipped, no update (%d of --skip-nonfinite %d)", self.step + 1, problem, skipped,
                            cfg.skip_nonfinite)
                self.optimizer.zero_grad(set_to_none=True)
            else:
                if cfg.grad_clip_norm is not None:  # as open_clip_train: on the unscaled gradients
                    self.scaler.unscale_(self.optimizer)
                    grad_norm = torch.nn.utils.clip_grad_norm_(self._trained(), cfg.grad_clip_norm)
                self.scaler.step(self.optimizer)
                self.scaler.update()
            self.scheduler.step()
            with torch.no_grad():  # as open_clip does: keep the temperature in range
                self.model.logit_scale.clamp_(0, math.log(100))
            self.step += 1
            seconds = time.perf_counter() - start
            record = {"step": self.step, "epoch": self.data.epoch, "loss": sum(terms.values()), **terms,
                      "lr": self.scheduler.get_last_lr()[-1], "logit_scale": self.model.logit_scale.exp().item(),
                      "images_per_s": per_step / seconds, **coverage.record()}
            if cfg.grad_clip_norm is not None and problem is None:
                record["grad_norm"] = float(grad_norm)  # before clipping, as torch returns it
            evaluated = self.evaluation.due(self.step)
            if evaluated:
                figures = self.evaluation(self.model, self.step)
                record.update(figures)
                self._keep_best(figures)
                if self.env.distributed:
                    dist.barrier()  # the other ranks wait for rank 0's evaluation
            if reporters is not None and (self.step % cfg.log_every == 0 or self.step == cfg.steps or evaluated):
                reporters.log(record)
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{record['loss']:.4f}", img_s=f"{record['images_per_s']:.0f}")
            saved = self.step % cfg.save_every == 0 or self.step == cfg.steps
            if saved:
                self.save()
            stop = self._stopping() if self.step < cfg.steps else None
            if stop is not None:
                if not saved:
                    self.save()
                raise Preempted(f"{signal.Signals(stop).name} at step {self.step} of {cfg.steps}: checkpoint "
                                f"{self.out / 'checkpoints' / f'step_{self.step:07d}'} written; run the same command to resume")
        return terms

    def _trained(self) -> list[torch.nn.Parameter]:
        """The parameters the optimizer updates: the model's and the method's own modules'."""
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _nonfinite(self, terms: dict[str, float]) -> str | None:
        """What is NaN or inf in this step (a loss term, else a gradient), or None. Under fp16 loss scaling the scaler
        itself skips steps whose gradients overflow."""
        bad = next((k for k, v in terms.items() if not math.isfinite(v)), None)
        if bad is not None:
            return f"loss term {bad} is {terms[bad]}"
        if self.scaler.is_enabled():
            return None
        params = [(n, p) for group in (self.model.named_parameters(), self.method.named_parameters()) for n, p in group
                  if p.grad is not None]
        norms = torch._foreach_norm([p.grad for _, p in params]) if params else []
        finite = torch.isfinite(torch.stack(norms)) if norms else torch.ones(0, dtype=torch.bool)
        if bool(finite.all()):
            return None
        return f"the gradient of {params[int((~finite).nonzero()[0])][0]} is not finite"

    def _backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def _check_coverage(self, coverage: Coverage) -> None:
        """After the first step's batches: the share of captions that gave the method concepts, logged; below 90 % a
        warning, below --min-concept-coverage a stop (a concept method that trains on nothing is another method)."""
        where = f"the concept store {self.cfg.concepts}" if self.cfg.concepts else "the shards' concept records"
        text = (f"{self.cfg.method}: {coverage.covered} of {coverage.total} captions of the first step have concepts it can use "
                f"({coverage.share:.1%}), from {where}")
        if coverage.share < self.cfg.min_concept_coverage:
            raise DataError(f"{text}, below --min-concept-coverage {self.cfg.min_concept_coverage}; e.g. {coverage.example!r} has "
                            "none: run `compclip concepts` over the training data (in span mode a phrase must also be found in "
                            "the caption's tokens)")
        if self.env.is_main:
            log.info("%s", text)
            if coverage.share < 0.9:
                log.warning("only %.1f%% of the captions have concepts, e.g. %r", 100 * coverage.share, coverage.example)


class Coverage:
    """Counts of the captions whose concepts a concept method could use (`Method.collate`'s `coverage`), over the run."""

    def __init__(self):
        self.covered = self.total = self.steps = 0
        self.example = ""

    def add(self, micro: list[dict[str, Any]]) -> bool:
        """Count one step's micro-batches; False for a method without concepts."""
        if "coverage" not in micro[0]:
            return False
        for batch in micro:
            covered, total = batch["coverage"].tolist()
            self.covered, self.total = self.covered + covered, self.total + total
            self.example = self.example or batch["uncovered"]
        self.steps += 1
        return True

    @property
    def share(self) -> float:
        return self.covered / self.total if self.total else 1.0

    def record(self) -> dict[str, float]:
        return {"concept_coverage": self.share} if self.steps else {}


def compile_blocks(model: torch.nn.Module) -> None:
    """--torchcompile: `torch.compile` each transformer block of both towers in place (PyTorch's regional compilation:
    the blocks share one compiled graph, compiled once, and every way a method reaches them, `encode_image` or its own
    token path, runs compiled; the weights keep their names)."""
    blocks = [block for name, module in model.named_modules() if name.rsplit(".", 1)[-1] in ("resblocks", "blocks")
              for block in module.children()]
    if not blocks:
        raise UsageError(f"--torchcompile: {type(model).__name__} has no transformer blocks (resblocks or blocks) to compile")
    for block in blocks:
        block.compile()


class _TrainModule(torch.nn.Module):
    """What DDP wraps: the model and the method's forward, so DDP sees every parameter used."""

    def __init__(self, model: torch.nn.Module, method: torch.nn.Module):
        super().__init__()
        self.model, self.method = model, method

    def forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        return self.method.outputs(self.model, batch)


class _Collate:
    """The method's batch transform as a picklable collate_fn for DataLoader workers, after the batch's image views where
    the reader left them to a `BatchedView`."""

    def __init__(self, method, tokenizer, view: BatchedView | None = None):
        self.method, self.tokenizer, self.view = method, tokenizer, view

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        if self.view is not None:
            views = self.view.batch(torch.stack([s["image"] for s in samples]), torch.tensor([s["crop"] for s in samples]))
            samples = [{**s, "image": v} for s, v in zip(samples, views, strict=True)]
        return self.method.collate(samples, self.tokenizer)


def train(cfg: TrainConfig, eval_hook=None) -> dict[str, float]:
    return Trainer(cfg, eval_hook).run()
