"""`TrainConfig`: every option of a run, declared once (name, type, default, help, check); `compclip train`'s flags
are generated from it. Nothing heavy is imported here, so that the command line's help stays instant."""
from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import MissingFileError, UsageError
from ..loggers import REPORTERS, parse_reporters
from ..names import BENCHMARK_LISTING, TRAIN_PRECISIONS, check_names
from ..options import MODEL_HELP, flag_of, option

OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULES = ("cosine", "const")
# A step of more micro-batches than this, reached from a recipe's global batch the user did not ask for, is refused
# (`refusals.refuse_long_accumulation`): each micro-batch is a forward and backward pass before the step's one update.
RECIPE_ACCUMULATION_LIMIT = 16
IMAGE_VIEWS = ("train", "eval")  # open_clip's two preprocessings of a model: `image_transform_v2(..., is_train=)`
VALIDATION_FIGURES = (*(f"val/{way}_{figure}" for way in ("image_to_text", "text_to_image")  # --val-data's, as open_clip_train
                         for figure in ("mean_rank", "median_rank", "R@1", "R@5", "R@10")), "val/clip_val_loss")  # names them


@dataclass
class TrainConfig:
    train_data: str = option(help="CSV/TSV, webdataset .tar shards (brace patterns), a captions .json, or an image .npy (JSONL "
                                  "beside it; several joined by :: are interleaved).")
    out: str = option(help="Run folder: checkpoints, log.jsonl, tensorboard; re-running resumes.")
    method: str | None = option(None, "Method, or a '+'-joined combination (c2lip+hardneg); `compclip methods` lists them and their "
                                      "options.  [required unless --recipe gives it]", names="method")
    model: str | None = option(None, MODEL_HELP + "  [required unless --recipe gives it]")
    recipe: str | None = option(None, "A paper's published setting (`compclip recipes`): its method, model, optimiser, schedule, "
                                      "batch, epochs and method options; a flag given beside it wins, and config.json records both.")
    pretrained: str | None = option(None, "open_clip pretrained tag or weights file for --model.")
    force_quick_gelu: bool = option(False, "Build --model with QuickGELU (open_clip's flag: OpenAI weights under a GELU config).")
    force_context_length: int | None = option(None, "Build --model with this text context length (open_clip's flag).")
    force_image_size: int | None = option(None, "Build --model for this image size (open_clip's flag; position embeddings are "
                                                "resized from --pretrained's).")
    force_patch_dropout: float | None = option(None, "Build --model with this patch dropout (open_clip's flag; active in training "
                                                     "only).")
    force_custom_text: bool = option(False, "Build --model as open_clip's CustomTextCLIP (a separate text tower; open_clip's flag).")
    concepts: str | None = option(None, "Concept store from `compclip concepts`, for a method that reads concepts (`compclip methods` "
                                        "lists the fields each one reads).")
    method_options: dict[str, Any] = option(help="KEY=VALUE, repeatable: an option of the method, e.g. lambda_npc=2 (`compclip "
                                                 "methods` lists them).", flag="--method-opt", factory=dict)
    image_key: str = option("image", "CSV/TSV image column.", aliases=("--csv-img-key",))
    caption_key: str = option("caption", "CSV/TSV caption column, webdataset json field, or JSONL field (.npy).",
                              aliases=("--csv-caption-key",))
    field_keys: dict[str, str] = option(help="NAME=KEY, repeatable: the record key (JSONL, a shard's json) holding the method's "
                                             "data field NAME, e.g. dense_captions=llm_captions (`compclip methods` lists "
                                             "each method's fields).  [default: NAME itself]", flag="--field-key", factory=dict)
    image_view: str | None = option(None, "The view of each image (and image field) trained on: train, open_clip's training view "
                                          "(RandomResizedCrop, open_clip_train's without --aug-cfg); eval, its evaluation view "
                                          "(Resize, CenterCrop), as a release that trains on its preprocess does.  [default: the "
                                          "method's own, `compclip methods` names it]")
    image_root: str | None = option(None, "Folder the CSV/JSON image paths are relative to.  [default: the data file's folder, "
                                          "or its images/]")
    batch_size: int = option(32, "Images per process and micro-batch.")
    accum_freq: int = option(1, "Micro-batches per optimizer step (features cached, open_clip style).")
    global_batch_size: int | None = option(None, "Images per optimizer step over all processes: sets --accum-freq to reach it from "
                                                 "--batch-size and the number of processes (it must divide evenly).")
    accept_accum: bool = option(False, "Reach a --recipe's global batch however many micro-batches of --batch-size a step takes: "
                                       f"more than {RECIPE_ACCUMULATION_LIMIT} are refused without it (a --global-batch-size "
                                       "given beside the recipe is asked for as well).")
    steps: int = option(1000, "Optimizer steps.")
    epochs: int | None = option(None, "Passes over --train-data: sets --steps to ⌈epochs × samples / global batch⌉.")
    train_num_samples: int | None = option(None, "Samples in one epoch of --train-data (open_clip's flag); needed by --epochs on "
                                                 "webdataset shards.  [default: the data file's records]")
    dataset_resampled: bool = option(False, "webdataset shards drawn with replacement (open_clip's flag): each DataLoader worker "
                                            "draws its own seeded sequence of shards, --train-num-samples samples an epoch over all "
                                            "(without it, the whole run is one epoch).")
    lr: float = option(1e-5, "Peak learning rate.")
    warmup_lr: float = option(0.0, "Learning rate the linear warm-up starts from (timm's --warmup-lr).")
    min_lr: float = option(0.0, "Learning rate the cosine schedule ends at (timm's --min-lr); rates of the method's own modules "
                                "scale alike.")
    weight_decay: float = option(0.0, "Weight decay (not on gains, biases and logit scale/bias).", flag="--wd")
    optimizer: str = option("adam", f"{', '.join(OPTIMIZERS)}.", aliases=("--opt",))
    betas: tuple[float, float] = option((0.9, 0.999), "Adam's betas (β1, β2)", flag=("--beta1", "--beta2"))
    eps: float = option(1e-8, "Adam ε.")
    warmup: int = option(0, "Linear warm-up steps.")
    warmup_fraction: float = option(0.0, "Linear warm-up over this share of the steps: sets --warmup.")
    schedule: str = option("cosine", "cosine or const after warm-up.", aliases=("--lr-scheduler",))
    precision: str = option("fp32", "As open_clip_train spells it: fp32; amp (fp16 autocast, loss scaling) or amp_bf16 (also "
                                    "amp_bfloat16): fp32 weights, autocast; bf16 or fp16: OpenAI's mixed precision (weights in 16 "
                                    "bits, layer norms in 32); pure_bf16 or pure_fp16: every weight in 16 bits.")
    grad_clip_norm: float | None = option(None, "Clip the gradients' global L2 norm to this (open_clip's flag; under amp after "
                                                "unscaling).")
    torchcompile: bool = option(False, "torch.compile the model and the method's forward (open_clip's flag; the first steps "
                                       "compile).")
    grad_checkpointing: bool = option(False, "Recompute activations in backward to save memory.")
    lock_image: bool = option(False, "Freeze the image tower.")
    lock_image_unlocked_groups: int = option(0, "With --lock-image (or a method that locks it): leave the image tower's last N layer "
                                                "groups trainable, as open_clip's flag of that name (timm's groups: 1 on a timm ViT is "
                                                "its attention-pool head, 2 adds the last block and the final norm).")
    lock_text: bool = option(False, "Freeze the text tower.")
    workers: int = option(2, "DataLoader workers per process.")
    shuffle: int = option(1000, "Records in each worker's seeded shuffle buffer of shards (new order each epoch); a finite file "
                                "is shuffled whole each epoch; 0 reads in file order.")
    seed: int = option(0, "Seed of the model's initialisation, data order, augmentation and negatives.")
    seeds: str | None = option(None, "Comma-separated seeds trained one after another, each into OUT/seed-S (a paper's mean over "
                                     "seeds, OC-CLIP's three); one process.")
    save_every: int = option(500, "Checkpoint every N steps (and at the end).")
    keep: int = option(2, "Checkpoints to keep.")
    resume: str | None = option(None, "Resume from a checkpoint folder (OUT/checkpoints/step_N), or latest: the newest in --out, "
                                      "which must be there (open_clip's flag).  [default: the newest in --out where there is one]")
    log_every: int = option(1, "Write log.jsonl, TensorBoard and W&B every N steps.", aliases=("--log-every-n-steps",))
    report_to: str = option("tensorboard", f"Comma-separated loggers besides log.jsonl: {', '.join(REPORTERS)}, or none (open_clip's "
                                           "flag). W&B runs offline under WANDB_MODE=offline (`wandb sync` uploads later).")
    wandb_project_name: str = option("compclip", "The W&B project (open_clip's flag); the run is named after --out and resumes with it.")
    eval_benchmarks: str | None = option(None, "Comma-separated benchmarks (as `compclip eval --benchmark`: NAME or NAME/SPLIT) run "
                                               "on the model in training every --eval-every steps and at the end, on rank 0; figures go "
                                               "to log.jsonl, TensorBoard and W&B as eval/NAME/SPLIT/METRIC.", names="benchmark")
    eval_data_root: str | None = option(None, "The benchmarks' data root (docs/data.md).  [default: $COMPCLIP_DATA]")
    val_data: str | None = option(None, "Held-out image-caption pairs (the formats of --train-data): retrieval both ways and the "
                                        "contrastive loss, open_clip's val metrics (val/image_to_text_R@1, ...), every --eval-every "
                                        "steps and at the end.")
    eval_every: int = option(0, "Evaluate every N steps (and at the last step): --eval-benchmarks, --val-data, or the hook of "
                                "`train(cfg, eval_hook)` from Python.  [default 0: at the last step only]")
    keep_best: str | None = option(None, "Keep the checkpoint best by this evaluation figure in OUT/checkpoints/best: a logged name "
                                         "less its eval/, such as sugarcrepe/swap_att/acc (sugarcrepe/swap_att: its first score), "
                                         "winoground/group_score or "
                                         "val/image_to_text_R@1 (higher is better; lower for val/clip_val_loss and the val ranks).")
    device: str | None = option(None, "cpu to stay off the GPU.  [default: each process takes the GPU of its local rank, if any]")
    dist_timeout: int = option(1800, "Seconds a rank waits in a collective (gradients, the stop signal) for the others before it "
                                     "stops with an error, as when another node died: torch's init_process_group timeout.")
    min_concept_coverage: float = option(0.5, "A concept method stops when fewer of the first step's captions have concepts it can "
                                              "use (0 never stops).")
    skip_nonfinite: int = option(0, "Steps with a NaN or inf loss or gradient skipped (no update) before training stops.")

    def seed_list(self) -> list[int]:
        """--seeds as numbers (empty without it), refused in one line where it cannot be read or under torchrun."""
        if not self.seeds:
            return []
        try:
            seeds = [int(s) for s in self.seeds.split(",") if s.strip()]
        except ValueError:
            raise UsageError(f"--seeds {self.seeds}: give comma-separated whole numbers, such as 0,1,2") from None
        if len(set(seeds)) != len(seeds) or not seeds:
            raise UsageError(f"--seeds {self.seeds}: give each seed once")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise UsageError("--seeds trains its runs one after another in one process: under torchrun, launch one job per --seed")
        return seeds

    def validate(self) -> None:
        """Every value checked before a model is built or a file written; errors name the CLI option."""
        from ..data import data_format
        from ..data.skips import MAX_WORKERS

        self.check_values()
        if self.workers > MAX_WORKERS:
            raise UsageError(f"--workers must be at most {MAX_WORKERS}, not {self.workers}")
        check_device(self.device)
        self._validate_open_clip_flags()
        self._validate_evaluation()
        out = Path(self.out)
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {out} is a file; a run writes a folder")
        missing = data_format(self.train_data).missing_file(self.train_data)
        if missing:
            raise MissingFileError(f"--train-data {missing}: no such file")
        for name in ("image_root", "concepts"):
            if getattr(self, name) is not None and not Path(getattr(self, name)).is_dir():
                raise MissingFileError(f"{flag_of(TrainConfig, name)} {getattr(self, name)}: no such folder")

    def check_values(self) -> None:
        """The values checked by their declarations alone (numbers, names, precisions), importing nothing heavy: the
        command line runs this before torch's import, so that a typo is answered at once."""
        for name in ("method", "model"):
            if getattr(self, name) is None:
                raise UsageError(f"{flag_of(TrainConfig, name)} is required: give it, or a --recipe that sets it (`compclip recipes`)")
        if self.recipe is not None:
            from ..recipes import get_recipe

            get_recipe(self.recipe)
        at_least = {"steps": 1, "batch_size": 1, "accum_freq": 1, "save_every": 1, "keep": 1, "log_every": 1,
                    "warmup": 0, "workers": 0, "shuffle": 0, "eval_every": 0, "skip_nonfinite": 0, "dist_timeout": 1,
                    "weight_decay": 0, "lock_image_unlocked_groups": 0, "warmup_lr": 0, "min_lr": 0}
        for name in ("epochs", "train_num_samples", "global_batch_size", "force_context_length", "force_image_size"):
            if getattr(self, name) is not None:
                at_least[name] = 1
        for name, low in at_least.items():
            if getattr(self, name) < low:
                raise UsageError(f"{flag_of(TrainConfig, name)} must be at least {low}, not {getattr(self, name)}")
        if not 0 <= self.warmup_fraction < 1:
            raise UsageError(f"--warmup-fraction must lie in [0, 1), not {self.warmup_fraction}")
        if not self.min_lr <= self.lr or not self.warmup_lr <= self.lr:
            raise UsageError(f"--warmup-lr {self.warmup_lr} and --min-lr {self.min_lr} must not exceed --lr {self.lr}")
        if not self.lr > 0 or not self.eps > 0:
            raise UsageError(f"--lr and --eps must be positive, not {self.lr} and {self.eps}")
        if not 0 <= self.min_concept_coverage <= 1:
            raise UsageError(f"--min-concept-coverage must lie in [0, 1], not {self.min_concept_coverage}")
        if not all(0 <= b < 1 for b in self.betas):
            raise UsageError(f"{flag_of(TrainConfig, 'betas')} must lie in [0, 1), not {self.betas[0]} and {self.betas[1]}")
        given_view = () if self.image_view is None else (("image_view", IMAGE_VIEWS),)  # None: the method's own
        for name, allowed in (("optimizer", OPTIMIZERS), ("schedule", SCHEDULES), ("precision", TRAIN_PRECISIONS), *given_view):
            if getattr(self, name) not in allowed:
                raise UsageError(f"{flag_of(TrainConfig, name)} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")
        if self.force_patch_dropout is not None and not 0 <= self.force_patch_dropout < 1:
            raise UsageError(f"--force-patch-dropout must lie in [0, 1), not {self.force_patch_dropout}")
        if self.grad_clip_norm is not None and not self.grad_clip_norm > 0:
            raise UsageError(f"--grad-clip-norm must be positive, not {self.grad_clip_norm}")
        check_names("method", self.method.split("+"))
        if self.eval_benchmarks is not None:
            check_names("benchmark", [item.partition("/")[0] for item in map(str.strip, self.eval_benchmarks.split(",")) if item],
                        BENCHMARK_LISTING)

    def _validate_open_clip_flags(self) -> None:
        from ..data import data_format

        if self.dataset_resampled and not data_format(self.train_data).streamed:
            raise UsageError(f"--dataset-resampled draws webdataset shards with replacement: --train-data {self.train_data} is no "
                             "shards (a CSV or an array is read whole each epoch: --no-dataset-resampled)")
        from ..models.checkpoint import STATE_NAME  # (here: `compclip train --help` imports this module, not torch)

        if self.resume not in (None, "latest") and not (Path(self.resume) / STATE_NAME).is_file():
            raise MissingFileError(f"--resume {self.resume}: not a checkpoint folder (it has no training_state.pt); give "
                                   "OUT/checkpoints/step_N or latest")

    def _validate_evaluation(self) -> None:
        if self.eval_benchmarks is not None:
            from ..eval.base import data_root
            from ..eval.run import resolve

            resolve(self.eval_benchmarks)
            root = data_root(self.eval_data_root)
            if not root.is_dir():
                raise MissingFileError(f"--eval-benchmarks: the data root {root} is not a folder (--eval-data-root or COMPCLIP_DATA)")
        if self.val_data is not None and not Path(self.val_data).is_file():
            raise MissingFileError(f"--val-data {self.val_data}: no such file")
        if self.keep_best is not None and self.eval_benchmarks is None and self.val_data is None:
            raise UsageError(f"--keep-best {self.keep_best} ranks checkpoints by an evaluation: give --eval-benchmarks or --val-data")
        if self.keep_best is not None and self.keep_best.startswith("val/") and self.keep_best not in VALIDATION_FIGURES:
            raise UsageError(f"--keep-best {self.keep_best}: not a figure of --val-data; they are {', '.join(VALIDATION_FIGURES)}")

    @property
    def reporters(self) -> list[str]:
        """--report-to as a list of loggers (none: only log.jsonl)."""
        return parse_reporters(self.report_to)

    @classmethod
    def from_given(cls, given: dict[str, Any]) -> TrainConfig:
        """The run's options from those the user gave: over the settings of `given["recipe"]` where one is named
        (`compclip.recipes`), else over the defaults. Two ways of saying one thing (--steps and --epochs) are refused."""
        from ..recipes import ALTERNATIVES, get_recipe

        order = list(cls.__dataclass_fields__)
        both = sorted({tuple(sorted((k, ALTERNATIVES[k]), key=order.index)) for k in given if ALTERNATIVES.get(k) in given})
        if both:
            a, b = both[0]
            raise UsageError(f"give {flag_of(cls, a)} or {flag_of(cls, b)}, not both")
        if given.get("recipe") is None:
            return cls(**given)
        return cls(**get_recipe(given["recipe"]).apply(given))

    def resolved(self, world_size: int, records: Callable[[], int], method_view: str = "train") -> TrainConfig:
        """This run's options with every value derived from others in its place, as a copy (the options given stay as
        given, so one TrainConfig can start several runs). Each derivation is made here and nowhere else:
        - the options that name files (`PATH_OPTIONS`) as absolute paths (`absolute_path`): what a run records and a
          resume compares is the files they named from where the run started, not the strings as typed;
        - --global-batch-size as --accum-freq over `world_size` processes;
        - --epochs as --steps (`records` counts the data's samples when --train-num-samples does not);
        - --warmup-fraction as --warmup;
        - --image-view, where it is not given, as the method's own (`method_view`: its `image_view`).
        Every process computes the same numbers; a resumed run compares them with its checkpoint's."""
        run = replace(self, **{name: absolute_path(getattr(self, name)) for name in PATH_OPTIONS})
        per_step = run.batch_size * world_size
        if run.global_batch_size is not None:
            if run.global_batch_size % per_step:
                raise UsageError(f"--global-batch-size {run.global_batch_size} is not a multiple of --batch-size {run.batch_size} × "
                                 f"{world_size} process(es) = {per_step}: choose a --batch-size that divides it")
            run.accum_freq = run.global_batch_size // per_step
        if run.epochs is not None:
            samples = run.train_num_samples or records()
            run.steps = max(1, math.ceil(run.epochs * samples / (per_step * run.accum_freq)))
        if run.warmup_fraction:
            run.warmup = round(run.warmup_fraction * run.steps)
        if run.image_view is None:
            run.image_view = method_view
        return run


# open_clip_train's flags whose meaning compclip gives another flag (its own names of the same meaning are aliases of
# the fields above): each one's error says which compclip flag it is.
OPEN_CLIP_ELSEWHERE = {
    "--save-frequency": "it counts epochs; compclip's --save-every counts steps",
    "--save-most-recent": "compclip always points OUT/checkpoints/latest at the newest checkpoint",
    "--delete-previous-checkpoint": "compclip's --keep 1 keeps the newest checkpoint alone",
    "--logs": "compclip's --out is the run's folder (checkpoints, log.jsonl, tensorboard)",
    "--name": "compclip's --out is the run's folder, and W&B's run name",
    "--zeroshot-frequency": "it counts epochs; compclip's --eval-benchmarks zeroshot --eval-every N evaluates every N steps",
    "--val-frequency": "it counts epochs; compclip's --eval-every N evaluates --val-data every N steps",
    "--imagenet-val": "compclip's --eval-benchmarks zeroshot reads ImageNet from --eval-data-root (docs/data.md)",
    "--skip-scheduler": "compclip's --schedule const keeps the rate after warm-up",
    "--siglip": "compclip's --method siglip trains with the sigmoid loss",
    "--dataset-type": "compclip reads the type from --train-data's name (.csv/.tsv, .jsonl, .tar shards, .json, .npy: each format of "
                      "compclip.data.FORMATS names its own)",
    "--csv-separator": "compclip reads the separator from the file's name: .csv (comma) or .tsv (tab)",
    "--wandb-notes": "compclip names the W&B run after --out; its notes are W&B's WANDB_NOTES",
    "--dist-url": "compclip reads torchrun's or SLURM's environment",
    "--dist-backend": "compclip takes NCCL on GPUs and gloo on CPUs",
    "--local-loss": "compclip's losses always gather every rank's features with their gradients and compute this rank's rows "
                    "(open_clip_train's --local-loss --gather-with-grad together)",
    "--gather-with-grad": "compclip's losses always gather every rank's features with their gradients (with --local-loss's "
                          "rows per rank)",
    "--loss-dist-impl": "compclip's losses gather features with gradients (all_gather), their one distributed form",
    "--aug-cfg": "compclip's --image-view chooses open_clip's plain training view (RandomResizedCrop, its default without "
                 "--aug-cfg) or its evaluation view; a method may add its own (CLIC's half-size views)",
    "--image-mean": "compclip preprocesses with the model's own settings (its open_clip config's preprocess_cfg)",
    "--image-std": "compclip preprocesses with the model's own settings (its open_clip config's preprocess_cfg)",
    "--image-interpolation": "compclip preprocesses with the model's own settings (its open_clip config's preprocess_cfg)",
    "--image-resize-mode": "compclip preprocesses with the model's own settings (its open_clip config's preprocess_cfg)",
    "--lr-cooldown-end": "compclip's schedules have no cooldown: --schedule cosine ends at --min-lr",
    "--lr-cooldown-power": "compclip's schedules have no cooldown: --schedule cosine ends at --min-lr",
    "--epochs-cooldown": "compclip's schedules have no cooldown: --schedule cosine ends at --min-lr",
    "--momentum": "compclip's --optimizer sgd is plain SGD; adam and adamw take --betas",
    "--use-bn-sync": "compclip keeps a model's batch norms as they are (open_clip's ViTs have none)",
    "--pretrained-image": "compclip loads a whole open_clip model with --pretrained; an image tower's weights alone are not read",
    "--lock-image-freeze-bn-stats": "compclip's --lock-image locks with open_clip's default (batch-norm statistics not frozen)",
    "--lock-text-unlocked-layers": "compclip's --lock-text locks the whole text tower",
    "--lock-text-freeze-layer-norm": "compclip's --lock-text locks the whole text tower",
    "--train-data-upsampling-factors": "compclip trains on one --train-data; write mixed sources into one set of shards",
    "--val-num-samples": "compclip's --val-data is a CSV, its records counted",
    "--imagenet-v2": "compclip's --eval-benchmarks zeroshot reads the class folders under --eval-data-root (docs/data.md)",
    "--cache-dir": "open_clip's downloads go to Hugging Face's cache: set HF_HOME or HF_HUB_CACHE",
    "--log-local": "compclip's rank 0 writes OUT/train.log and log.jsonl; each process's warnings also go to its stderr",
    "--debug": "compclip's --verbose (before or after the command) logs debug lines",
    "--copy-codebase": "compclip records its version and every option in OUT/config.json",
    "--horovod": "compclip runs its processes under torchrun or SLURM (PyTorch DDP)",
    "--ddp-static-graph": "compclip wraps the model in DDP with its defaults",
    "--no-set-device-rank": "compclip takes cuda:LOCAL_RANK; choose the GPUs with CUDA_VISIBLE_DEVICES",
    "--torchscript": "compclip trains the model as open_clip builds it; `compclip export` writes open_clip and transformers formats",
    "--trace": "compclip trains the model as open_clip builds it; --torchcompile compiles its blocks",
    "--coca-caption-loss-weight": "compclip's methods are contrastive; CoCa's captioning loss is not among them",
    "--coca-contrastive-loss-weight": "compclip's methods are contrastive; CoCa's captioning loss is not among them",
    "--remote-sync": "compclip writes checkpoints under --out, each atomically: sync that folder with your own tool",
    "--remote-sync-frequency": "compclip writes checkpoints under --out, each atomically: sync that folder with your own tool",
    "--remote-sync-protocol": "compclip writes checkpoints under --out, each atomically: sync that folder with your own tool",
    "--distill-model": "compclip has no distillation method",
    "--distill-pretrained": "compclip has no distillation method",
    "--use-bnb-linear": "compclip trains torch's own layers; --precision chooses the arithmetic",
}

# `compclip train --help` in these sections, in this order: each option of TrainConfig in one (tests/test_cli.py checks).
HELP_GROUPS = {
    "Model": ("model", "pretrained", "force_quick_gelu", "force_context_length", "force_image_size", "force_patch_dropout",
              "force_custom_text", "lock_image", "lock_image_unlocked_groups", "lock_text", "grad_checkpointing", "torchcompile"),
    "Data": ("train_data", "concepts", "image_key", "caption_key", "field_keys", "image_root", "image_view", "train_num_samples",
             "dataset_resampled", "workers", "shuffle", "min_concept_coverage"),
    "Method": ("method", "recipe", "method_options"),
    "Optimisation": ("batch_size", "accum_freq", "global_batch_size", "accept_accum", "steps", "epochs", "lr", "warmup", "warmup_fraction",
                     "warmup_lr", "min_lr", "schedule", "optimizer", "betas", "eps", "weight_decay", "grad_clip_norm", "precision",
                     "seed", "seeds", "skip_nonfinite"),
    "Evaluation": ("eval_benchmarks", "eval_data_root", "eval_every", "val_data", "keep_best"),
    "Cluster": ("device", "dist_timeout", "resume", "save_every", "keep"),
    "Logging": ("out", "log_every", "report_to", "wandb_project_name"),
}

PATH_OPTIONS = ("train_data", "concepts", "image_root", "model", "pretrained", "val_data", "eval_data_root", "resume")


def absolute_path(value: str | None) -> str | None:
    """A path option with each of its parts (`::`-joined data, a shard pattern's folder) made absolute where it names
    something on disk; names that are not paths (an open_clip model, a pretrained tag, an `hf-hub:` id) stay as they are."""
    if value is None:
        return None
    parts = []
    for part in value.split("::"):
        path = Path(part)
        if path.exists():
            part = str(path.resolve())
        elif "{" in path.name and path.parent.is_dir():  # webdataset's brace pattern: its folder
            part = str(path.parent.resolve() / path.name)
        parts.append(part)
    return "::".join(parts)


def global_batch(cfg: TrainConfig, world_size: int) -> str:
    """How a step of the resolved options `cfg` reaches its global batch, as a run says it before its first step and a
    refusal names it: `global batch 1512 = 8 per rank × 189 micro-batches × 1 rank`."""
    micro = "micro-batch" if cfg.accum_freq == 1 else "micro-batches"
    ranks = "rank" if world_size == 1 else "ranks"
    return (f"global batch {cfg.batch_size * cfg.accum_freq * world_size} = {cfg.batch_size} per rank × {cfg.accum_freq} {micro} "
            f"× {world_size} {ranks}")


def reader_kwargs(cfg: TrainConfig, data: str, image_root: str | None) -> dict[str, Any]:
    """What `open_reader` takes for the data file `data` of this run: of its columns or fields and where its images are,
    those its format reads."""
    from ..data import reader_options

    return reader_options(data, image_key=cfg.image_key, caption_key=cfg.caption_key, image_root=image_root)


def data_fields(cfg: TrainConfig, declared: tuple[str, ...]) -> dict[str, str]:
    """The data fields the method declares, each with the record key that holds it (`--field-key NAME=KEY`, else its
    name), for the reader's `fields`; a --field-key the method does not read is refused, naming those it does."""
    unknown = sorted(set(cfg.field_keys) - set(declared))
    if unknown:
        reads = f"reads {', '.join(declared)}" if declared else "reads no data field"
        raise UsageError(f"--field-key {unknown[0]}: method {cfg.method} {reads}")
    return {name: cfg.field_keys.get(name, name) for name in declared}


def check_device(device: str | None) -> None:
    """`--device`: None (a GPU where torch sees one), cpu, or cuda where torch sees one (not a silent fall back to the CPU)."""
    if device not in (None, "cpu", "cuda"):
        raise UsageError(f"--device must be cpu or cuda (each process takes its local rank's GPU), not {device!r}")
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no GPU here")
