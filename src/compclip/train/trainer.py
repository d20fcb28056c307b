"""`compclip train`: fine-tune an open_clip model with a registered method, on one process or many.

The `Trainer` builds a run from its options (model, method, optimizer, reader) and runs `loop.train_loop` over it,
answering the loop's `after_step` hook: evaluation, logs, checkpoints, preemption. The parts live beside it: the
training state (`state.TrainState`, saved as `training_state.pt` beside the weights every `save_every` steps, so a run
started again in the same `--out` resumes exactly), one step's exact accumulation and gather (`step`), the schedule
and optimizer (`optim`), what goes wrong mid-run (`faults`), and what is refused before it starts (`refusals`).
Logs go to `log.jsonl` and TensorBoard on rank 0.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..data import data_files, data_format, image_files, open_reader
from ..data.augment import BatchedView
from ..data.readers import image_fields
from ..data.shared_memory import check_shared_memory
from ..errors import DataError, MissingFileError, NonFiniteError, PeerLost, Preempted, StorageError, UsageError
from ..io import atomic_path, open_own, write_json
from ..models import image_bytes
from ..models.checkpoint import (
    CONFIG_NAME,
    MODULES_NAME,
    STATE_NAME,
    RunFolder,
    first_nonfinite,
    load_module_weights,
    read_config,
    remove_checkpoint,
)
from ..models.tokens import TextWidth, text_width
from ..precision import autocast, input_dtype, weights_precision
from ..progress import progress
from .config import TrainConfig, data_fields, global_batch, reader_kwargs
from .coverage import Coverage, check_coverage
from .distributed import DistEnv, init_distributed, leave
from .evaluation import RunEvaluation, keep_if_best
from .faults import NonFiniteGuard, StopSignals, peer_lost, worker_init
from .loop import train_loop
from .optim import lr_schedule, make_optimizer, param_groups
from .refusals import (
    nothing_to_train_on,
    refuse_another_run,
    refuse_long_accumulation,
    refuse_neighbours_outside,
    refuse_what_cannot_learn,
)
from .run_folder import RunLock, latest_checkpoint
from .run_loggers import RunLoggers
from .state import TrainState

log = logging.getLogger("compclip.train")


class Trainer:
    def __init__(self, cfg: TrainConfig, eval_hook: Callable[[torch.nn.Module, int], dict[str, float]] | None = None):
        """Trains with the options `cfg` as given; `self.cfg` is the run's own, every derived value in place
        (`TrainConfig.resolved`)."""
        cfg.validate()
        self.env: DistEnv = init_distributed(cfg.device, cfg.dist_timeout)
        try:
            self._set_up(cfg, eval_hook)
        except BaseException:  # a refusal on every rank: leave the group as a finished run does
            leave(self.env)
            raise

    def _set_up(self, given: TrainConfig, eval_hook: Callable[[torch.nn.Module, int], dict[str, float]] | None) -> None:
        from ..concepts import ConceptStore
        from ..methods import build_method
        from ..models import eval_preprocess, load_model, train_preprocess

        concepts = ConceptStore(given.concepts) if given.concepts else carried_concepts(given)
        self.method = build_method(given.method, concepts=concepts, seed=given.seed, **given.method_options)  # what an epoch counts
        self.epoch_records: dict[str, int] = {}
        # one reader over the whole data for what set-up counts and hashes: a CSV parsed once for both, its rows let go
        # after set-up (the loader's own reader comes later, with the transform)
        fields = data_fields(given, self.method.sample_fields)
        whole = open_reader(given.train_data, **reader_kwargs(given, given.train_data, given.image_root), admit=self.method.admits,
                            fields=fields)
        self.cfg = cfg = given.resolved(self.env.world_size, lambda: self._records_an_epoch(whole, given), self.method.image_view)
        refuse_long_accumulation(cfg, self.env.world_size)
        refuse_neighbours_outside(whole)
        self.out = Path(cfg.out)
        self.run_folder = RunFolder(self.out)  # its layout
        self.data_files = data_files(cfg.train_data)  # what a resume compares beside the options
        if self.data_files is not None:
            self.data_files |= image_files(whole)
        self.resume_from = self._resume_folder()
        # reads OUT only: writing waits for `run` to own it
        self.extension = refuse_another_run(cfg, self.resume_from, self.data_files)
        if concepts is None and self.method.uses_concepts:
            raise UsageError(f"method {cfg.method} trains on concepts: pass --concepts DIR (from `compclip concepts`), "
                             "or train on shards that carry them (`compclip concepts SHARDS --into-shards DIR`)")
        torch.manual_seed(cfg.seed)  # the model's initialisation, where it is built from scratch, then the method's modules
        model, _, self.tokenizer = load_model(cfg.model, cfg.pretrained, device=self.env.device, init_seed=None,
                                              precision=weights_precision(cfg.precision), weights_follow=self.resume_from is not None,
                                              **self._forced())
        self.method.bind(model)  # the method's own modules, sized by the model (seeded like it)
        if (Path(cfg.model) / MODULES_NAME).is_file() and read_config(cfg.model).get("method") == cfg.method:
            load_module_weights(self.method, cfg.model)  # a checkpoint of this method goes on with the modules it trained
        if cfg.lock_image or self.method.locks_image:
            model.lock_image_tower(unlocked_groups=cfg.lock_image_unlocked_groups)
        if cfg.lock_text:
            model.lock_text_tower()
        if getattr(model, "logit_bias", None) is not None and not self.method.uses_logit_bias:
            model.logit_bias.requires_grad_(False)  # a softmax loss never reads it, and DDP wants every trained parameter used
        refuse_what_cannot_learn(cfg, model, self.method, self.env.world_size)
        if cfg.grad_checkpointing:
            model.set_grad_checkpointing(True)
        self.model = model.train()
        self.module = _TrainModule(model, self.method)
        if self.env.distributed:
            ids = [self.env.device.index] if self.env.device.type == "cuda" else None
            self.module = DistributedDataParallel(self.module, device_ids=ids)
        if cfg.torchcompile:
            compile_blocks(model)
        groups = param_groups(model.named_parameters(), cfg.weight_decay) + self.method.param_groups(cfg.lr, cfg.weight_decay)
        optimizer = make_optimizer(cfg.optimizer, groups, cfg.lr, cfg.betas, cfg.eps)
        schedule = lr_schedule(cfg.lr, cfg.steps, cfg.warmup, cfg.schedule, cfg.warmup_lr, cfg.min_lr)
        # on the run's own device: torch's default, CUDA's, turns itself off on a CPU, and fp16 then trains unscaled
        scaler = torch.amp.GradScaler(self.env.device.type, enabled=cfg.precision == "amp")
        self.state = TrainState(self.model, self.method, self.module, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule),
                                scaler)
        view = train_preprocess(model) if cfg.image_view == "train" else eval_preprocess(model)  # --image-view
        transform = self.method.image_transform(model, view)
        # decoded arrays take open_clip's training view per batch, bit for bit the same (`BatchedView`)
        self.view = BatchedView.of(view) if transform is None and data_format(cfg.train_data).decoded else None
        # without --train-num-samples, an epoch of resampled shards is the whole run (its steps' samples, every process's)
        whole_run = cfg.steps * cfg.batch_size * cfg.accum_freq * self.env.world_size
        self.reader = open_reader(cfg.train_data, transform=self.view or transform or view,
                                  **reader_kwargs(cfg, cfg.train_data, cfg.image_root), sample_seed=cfg.seed * 1000,
                                  shuffle=cfg.shuffle, admit=self.method.admits,
                                  partners=self.method.wants_partners, fields=fields,
                                  resampled=(cfg.train_num_samples or whole_run) if cfg.dataset_resampled else 0,
                                  batch_size=cfg.batch_size)
        self.reader.check_partners()  # the reader's own reason, before a DataLoader worker would meet it
        self.evaluation = RunEvaluation(cfg, self.method, self.tokenizer, self.env.device, self.env.is_main, eval_hook)
        self.signals = StopSignals(announce=self.env.is_main)
        self._resume()

    # the state's parts, by the names open_clip_train's loop uses
    optimizer = property(lambda self: self.state.optimizer)
    scheduler = property(lambda self: self.state.scheduler)
    scaler = property(lambda self: self.state.scaler)
    step = property(lambda self: self.state.step)
    data = property(lambda self: self.state.data)

    def _forced(self) -> dict[str, Any]:
        """open_clip's --force-* overrides of the architecture, as `load_model` takes them (a checkpoint folder has its own)."""
        cfg = self.cfg
        forced = {name: getattr(cfg, name) for name in ("force_quick_gelu", "force_context_length", "force_image_size",
                                                         "force_patch_dropout", "force_custom_text")}
        return {k: v for k, v in forced.items() if v not in (None, False)}

    def _records_an_epoch(self, reader, cfg: TrainConfig) -> int:
        """What --epochs counts: the records the method trains on, those whose caption it admits (hardneg's keyword
        subsets, §3.3 of its paper: 3 epochs of the colour captions, not of COCO). Both counts go into config.json."""
        self.epoch_records = {"records": reader.num_records(), "admitted": reader.admitted_records()}
        if not self.epoch_records["admitted"]:
            raise DataError(f"--train-data {cfg.train_data}: method {cfg.method} admits none of its "
                            f"{self.epoch_records['records']:,} captions, so an epoch of it is no step")
        return self.epoch_records["admitted"]

    # -- data -------------------------------------------------------------------------
    def _loader(self) -> torch.utils.data.DataLoader:
        """One loader for the whole run: its workers persist across epochs, the reader moving itself on."""
        self.reader.start(self.data.epoch, self.data.positions, self.data.batches % max(1, self.cfg.workers), self.data.batches)
        if self.cfg.workers > 0 and self.reader.random_access and self.reader.shuffle > 1:
            self.reader.num_records()  # a file shuffled whole finds where its rows start here, once: the forked workers share it
        check_shared_memory(self.cfg.workers, self.cfg.batch_size * image_bytes(self.model), f"batches of {self.cfg.batch_size} images")
        return torch.utils.data.DataLoader(
            self.reader,
            batch_size=self.cfg.batch_size,
            num_workers=self.cfg.workers,
            collate_fn=_Collate(self.method, self.tokenizer, self.view, text_width(self.model)),
            drop_last=True,
            pin_memory=self.env.device.type == "cuda",
            persistent_workers=self.cfg.workers > 0,
            worker_init_fn=functools.partial(worker_init, self.signals.flag),
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
                raise DataError(nothing_to_train_on(self.reader, self.cfg))
            self.reader.skips.log_summary()
            self.data.new_epoch()

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
                                 f"under {self.run_folder.checkpoints} are untouched). Lower --lr")
        ranks = self._gather_objects(self.state.rank_state())
        if self.env.is_main:
            state = self.state.state_dict(ranks)
            folder = self.run_folder.step(self.step)
            try:
                self._write_model(folder, state=state)
            except StorageError as e:
                raise StorageError(f"{e}: training stopped at step {self.step}; the checkpoints before it are untouched: make room "
                                   "and run the same command to resume") from None
            with atomic_path(self.run_folder.pointer) as tmp:
                tmp.write_text(folder.name)
            for old in self.run_folder.steps()[: -max(1, self.cfg.keep)]:
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

    def _resume(self) -> None:
        folder = self.resume_from
        if folder is None:
            return
        try:
            self.state.load(folder, self.env.rank, self.env.world_size)
        except DataError as e:
            raise DataError(f"{e}; {self._previous_complete(folder)}") from None
        if self.env.is_main:
            log.info("resumed from %s at step %d", folder, self.step)

    def _previous_complete(self, damaged: Path) -> str:
        """Where to resume from instead of a damaged checkpoint."""
        folders = self.run_folder.steps()[::-1]
        earlier = [f for f in folders if f != damaged and (f / STATE_NAME).is_file()]
        if earlier:
            return (f"the previous checkpoint {earlier[0]} is complete: write {earlier[0].name} into {self.run_folder.pointer} "
                    "to resume from it")
        return f"no earlier checkpoint: remove {self.run_folder.checkpoints} to start the run again"

    def _keep_best(self, figures: dict[str, float]) -> None:
        """Rank 0: OUT/checkpoints/best becomes this step's model when its --keep-best figure is the best yet."""
        best = self.evaluation.best(figures) if self.env.is_main else None
        if best is None:
            return
        keep_if_best(self.run_folder.best, *best, self.step, save=self._write_model)

    def _write_model(self, folder: Path, **extra: Any) -> None:
        """This step's model and method modules with the run's options and data: what a checkpoint and `best` both hold."""
        from ..models import save_checkpoint

        save_checkpoint(self.model, folder, modules=self.method.state_dict(), method=self.cfg.method, step=self.step,
                        train_args=dataclasses.asdict(self.cfg), train_data_files=self.data_files, **extra)

    # -- logging ----------------------------------------------------------------------
    def _truncate_log(self) -> None:
        """Drop log lines past the resumed step: they are about to be written again. A line cut short (its write stopped
        by a full disk or a kill) is dropped too: it was past the last checkpoint."""
        log = self.out / "log.jsonl"

        def before_resumed_step(line: str) -> bool:
            try:
                return json.loads(line).get("step", 0) <= self.step
            except json.JSONDecodeError:
                return False

        if log.is_file():
            lines = [line for line in log.read_text().splitlines() if line and before_resumed_step(line)]
            with atomic_path(log) as tmp:
                tmp.write_text("".join(line + "\n" for line in lines))

    def _config_record(self) -> dict[str, Any]:
        """The run's options, and with a recipe its citation and each setting the run changed (`config.json`)."""
        record = dataclasses.asdict(self.cfg)
        if self.epoch_records:  # what --epochs counted
            record["epoch_records"] = self.epoch_records
        earlier = (self.out / "config.json").is_file() and json.loads((self.out / "config.json").read_text()).get("extended", [])
        extended = list(earlier or [])
        if self.extension and self.extension not in extended[-1:]:  # (not twice where a run killed before saving is resumed)
            extended.append(self.extension)
        if extended:  # each time more steps extended the run, in order
            record["extended"] = extended
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
            with self._train_log(), self.signals.installed(self.step):
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
        steps = range(self.step, self.cfg.steps)
        if not steps:
            return {}
        if self.env.is_main and (self.cfg.accum_freq > 1 or self.cfg.global_batch_size is not None):  # a step's cost, said
            log.info(global_batch(self.cfg, self.env.world_size))
        if self.env.is_main and self.cfg.recipe is not None:  # what the run will not do as the paper did, before it starts
            from ..recipes import get_recipe

            for departure in get_recipe(self.cfg.recipe).departures:
                log.info("recipe %s departs from the paper: %s", self.cfg.recipe, departure)
        batches = self._batches()
        try:
            return self._steps(steps, batches)
        except RuntimeError as e:
            lost = peer_lost(e, self.env, self.step, latest_checkpoint(self.out), self.cfg.dist_timeout)
            if lost is not None:
                raise lost from None
            raise
        finally:
            batches.close()

    def _steps(self, steps: range, batches: Iterator[dict[str, Any]]) -> dict[str, float]:
        """The first step's batches read and checked before anything is written, then the loop, logging as it goes."""
        cfg = self.cfg
        self.coverage = Coverage()
        first = [next(batches) for _ in range(cfg.accum_freq)]
        if self.coverage.add(first):
            check_coverage(cfg, self.coverage, self.env.is_main)
        self.loggers = None
        if self.env.is_main:
            record = self._config_record()
            write_json(self.out / "config.json", record)
            self.loggers = RunLoggers(self.out, cfg.reporters, record, cfg.wandb_project_name, cfg.steps)
        self.bar = progress(steps, f"train {cfg.method} ({self.out.name})", total=len(steps), unit="step") if self.env.is_main else steps
        pending = [first]

        def draw() -> list[dict[str, Any]]:
            if pending:
                return pending.pop()
            micro = [next(batches) for _ in range(cfg.accum_freq)]
            self.coverage.add(micro)
            return micro

        try:
            return train_loop(self.state, self.bar, draw, self.env, NonFiniteGuard(cfg.skip_nonfinite, self.run_folder.checkpoints),
                              self.after_step, cfg.grad_clip_norm, self._autocast)
        finally:
            if self.loggers is not None:
                self.loggers.close()

    def after_step(self, record: dict[str, Any]) -> None:
        """The loop's hook after each step: concept coverage, evaluation (and `best`), the log, the checkpoint, and a stop
        signal answered with a checkpoint and `Preempted`."""
        cfg = self.cfg
        record.update(self.coverage.record())
        evaluated = self.evaluation.due(self.step)
        if evaluated:
            figures = self.evaluation(self.model, self.step)
            record.update(figures)
            self._keep_best(figures)
            if self.env.distributed:
                dist.barrier()  # the other ranks wait for rank 0's evaluation
        if self.loggers is not None and (self.step % cfg.log_every == 0 or self.step == cfg.steps or evaluated):
            self.loggers.log(record)
        if hasattr(self.bar, "set_postfix"):  # a terminal's bar (`progress`): the figures of the line it does not print
            self.bar.set_postfix(loss=f"{record['loss']:#.5g}", lr=f"{record['lr']:.2e}",
                                 samples_s=f"{record['samples_per_second']:#.4g}")
        saved = self.step % cfg.save_every == 0 or self.step == cfg.steps
        if saved:
            self.save()
        stop = self.signals.asked(self.env, self.step) if self.step < cfg.steps else None
        if stop is not None:
            if not saved:
                self.save()
            raise Preempted(f"{signal.Signals(stop).name} at step {self.step} of {cfg.steps}: checkpoint "
                            f"{self.run_folder.step(self.step)} written; run the same command to resume")

    def _trained(self) -> list[torch.nn.Parameter]:
        return self.state.trained()


def carried_concepts(cfg: TrainConfig) -> Any:
    """Shards from `compclip concepts --into-shards` carry each sample's record: no store is needed. (Their reader, which
    brings spaCy, is imported only for such shards: a run without them does not load it.)"""
    fields = data_format(cfg.train_data).concept_fields(cfg.train_data, cfg.caption_key)
    if not fields:
        return None
    from ..concepts import SampleConcepts

    return SampleConcepts(fields, cfg.train_data)


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
    the reader left them to a `BatchedView`; the token fields' widths are measured there, on the host (`TextWidth`)."""

    def __init__(self, method, tokenizer, view: BatchedView | None = None, width: TextWidth | None = None):
        self.method, self.tokenizer, self.view, self.width = method, tokenizer, view, width

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        if self.view is not None:  # the image's, and each image field's (TripletCLIP's negative image, its box `NAME_crop`)
            for name in ("image", *image_fields(self.method.sample_fields)):
                crop = "crop" if name == "image" else f"{name}_crop"
                views = self.view.batch(torch.stack([s[name] for s in samples]), torch.tensor([s[crop] for s in samples]))
                samples = [{**s, name: v} for s, v in zip(samples, views, strict=True)]
        return self.method.collate(samples, self.tokenizer, self.width)


def train(cfg: TrainConfig, eval_hook=None) -> dict[str, float]:
    return Trainer(cfg, eval_hook).run()
