"""Evaluation during training: the harness's benchmarks (`--eval-benchmarks`, each by its own rule, as `compclip eval`
scores it) and open_clip_train's validation metrics (`--val-data`) on the model being trained, on rank 0, every
`--eval-every` steps and at the last; the best checkpoint by one figure (`--keep-best`) in OUT/checkpoints/best."""
from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..errors import DataError, UsageError
from ..io import write_json
from ..models import eval_preprocess
from ..precision import image_dtype
from .config import TrainConfig, reader_kwargs

log = logging.getLogger("compclip.train")

BEST_RECORD = "best.json"
LOWER_IS_BETTER = ("loss", "_rank")  # the figures where less is better: val/clip_val_loss and val/*_mean_rank, *_median_rank


def higher_is_better(figure: str) -> bool:
    return not figure.endswith(LOWER_IS_BETTER)


class RunEvaluation:
    """What a run evaluates, and when. `hook`, a Python caller's `eval_hook(model, step) -> {name: value}`, runs on
    every rank; the benchmarks and the validation data on rank 0 alone."""

    def __init__(self, cfg: TrainConfig, method, tokenizer, device: torch.device, is_main: bool,
                 hook: Callable[[torch.nn.Module, int], dict[str, float]] | None = None):
        from ..eval.base import REGISTRY, data_root
        from ..eval.run import benchmark_options, resolve

        self.cfg, self.method, self.tokenizer, self.device, self.is_main, self.hook = cfg, method, tokenizer, device, is_main, hook
        self.jobs = resolve(cfg.eval_benchmarks) if cfg.eval_benchmarks else []
        self.options = benchmark_options(self.jobs, {}) if self.jobs else {}
        self.root = data_root(cfg.eval_data_root) if self.jobs else None
        for job in self.jobs:
            lacks = REGISTRY[job.name].lacks(self.root, job.splits)
            if lacks:
                raise UsageError(f"--eval-benchmarks {job.label}: cannot run: {lacks}")
        if cfg.keep_best is not None:
            labels = [j.label for j in self.jobs] + (["val"] if cfg.val_data else [])
            if not any(cfg.keep_best == label or cfg.keep_best.startswith(label + "/") for label in labels):
                raise UsageError(f"--keep-best {cfg.keep_best}: not a figure of this run's evaluation; it starts with one of "
                                 f"{', '.join(labels)} (e.g. {labels[0]} for its first score)")

    @property
    def active(self) -> bool:
        return bool(self.jobs or self.cfg.val_data or self.hook)

    def due(self, step: int) -> bool:
        every = self.cfg.eval_every
        return self.active and (step == self.cfg.steps or (every > 0 and step % every == 0))

    @torch.no_grad()
    def __call__(self, model: torch.nn.Module, step: int) -> dict[str, float]:
        """The figures of this step's evaluation, as `eval/...` and `val/...` keys (empty on ranks other than 0, but for
        the hook's)."""
        figures: dict[str, float] = {}
        model.eval()
        self.method.eval()
        try:
            if self.hook is not None:
                figures |= {f"eval/{k}": v for k, v in self.hook(model, step).items()}
            if self.is_main:
                figures |= self._benchmarks(model)
                if self.cfg.val_data:
                    figures |= validation_metrics(model, eval_preprocess(model), self.tokenizer, self.cfg, self.device)
        finally:
            model.train()
            self.method.train()
        return figures

    def _benchmarks(self, model: torch.nn.Module) -> dict[str, float]:
        from ..eval.base import REGISTRY
        from ..eval.run import run_skipping_unreadable
        from ..eval.scorer import model_scorer

        if not self.jobs:
            return {}
        scorer = model_scorer(model, eval_preprocess(model), self.tokenizer, self.method, device=str(self.device),
                              batch_size=self.cfg.batch_size, workers=0)
        figures = {}
        for job in self.jobs:
            bench = REGISTRY[job.name]
            result = run_skipping_unreadable(bench, job.label, scorer, self.root, bench.ties, job.splits, self.options[job.name])
            scores = flat_scores(result.metrics)
            unscored = [k for k, v in scores.items() if math.isnan(v)]
            if unscored:  # NaN is no JSON, and a logger's chart of it shows nothing: said here, left out of the figures
                missing = result.missing.as_record()
                log.warning("--eval-benchmarks %s: %d of its %d figures scored no example (%d images missing, e.g. %s; %s): "
                            "left out of this step's figures", job.label, len(unscored), len(scores), missing["count"],
                            ", ".join(missing["examples"]) or "none", "; ".join(f"{p} {w}" for p, w in result.absent.items())
                            or "no file absent")
            figures |= {figure_tag(job.label, k): v for k, v in scores.items() if not math.isnan(v)}
        return figures

    def best(self, figures: dict[str, float]) -> tuple[str, float] | None:
        """The --keep-best figure among this evaluation's, and its value: the key named, else the first of the benchmark
        it names."""
        if self.cfg.keep_best is None:
            return None
        prefix = "" if self.cfg.keep_best.startswith("val/") else "eval/"
        key = prefix + self.cfg.keep_best
        if key not in figures:
            named = key
            key = next((k for k in figures if k.startswith(key + "/")), None)
            label = next((f"eval/{j.label}" for j in self.jobs if named == f"eval/{j.label}" or named.startswith(f"eval/{j.label}/")),
                         None)
            if key is None and label is not None and not any(k.startswith(label + "/") for k in figures):
                return None  # the benchmark scored nothing this time (said above): no best to judge
            if key is None:
                raise DataError(f"--keep-best {self.cfg.keep_best}: the evaluation gave no such figure; it gave "
                                f"{', '.join(sorted(figures)) or 'none'}")
        return key, figures[key]


def keep_if_best(folder: Path, figure: str, value: float, step: int, save: Callable[[Path], None]) -> bool:
    """Replace `folder` (OUT/checkpoints/best) through `save` when `value` beats the one it holds, by the figure's
    direction (a loss or a rank is best lowest); NaN never does."""
    record = folder / BEST_RECORD
    if math.isnan(value):
        return False
    higher = higher_is_better(figure)
    if record.is_file():
        kept = json.loads(record.read_text(encoding="utf-8"))["value"]
        if (kept >= value) if higher else (kept <= value):
            return False
    save(folder)
    write_json(record, {"metric": figure, "value": value, "step": step, "higher_is_better": higher})
    log.info("step %d: %s %.4f, the best so far: kept in %s", step, figure, value, folder)
    return True


def figure_tag(label: str, key: str) -> str:
    """The logged name of the score `key` (`swap_att/acc`) of the benchmark item `label` (`sugarcrepe` or
    `sugarcrepe/swap_att`): `eval/sugarcrepe/swap_att/acc` either way, a split named once, so that a figure has one name
    in log.jsonl, TensorBoard, W&B and --keep-best, whether its benchmark ran whole or that split alone."""
    _, _, split = label.partition("/")
    return f"eval/{label}/{key.removeprefix(split + '/') if split else key}"


def flat_scores(metrics: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """A result's scores (floats, not counts) as `a/b/c` keys, in the result's order."""
    out = {}
    for key, value in metrics.items():
        if isinstance(value, dict):
            out |= flat_scores(value, f"{prefix}{key}/")
        elif isinstance(value, float):
            out[f"{prefix}{key}"] = value
    return out


def validation_metrics(model: torch.nn.Module, preprocess, tokenizer, cfg: TrainConfig, device: torch.device) -> dict[str, float]:
    """open_clip_train's `evaluate` over --val-data: each (image, caption) pair is its own query and its only match
    over the whole set (`get_clip_metrics`: mean and median rank, R@1/5/10, both ways), and `clip_val_loss`, the
    contrastive loss of each batch of --batch-size pairs, averaged weighted by the batch's size (`cumulative_loss /
    num_samples`: a loss of batches as training sees them, not of the whole set as one)."""
    from ..data import open_reader

    reader = open_reader(cfg.val_data, transform=preprocess, **reader_kwargs(cfg, cfg.val_data, image_root=None))
    images, texts, losses = [], [], []
    batch: list[dict[str, Any]] = []
    dtype = image_dtype(model)
    scale = model.logit_scale.exp().float().cpu()

    def flush():
        pixels = torch.stack([s["image"] for s in batch]).to(device, dtype=dtype)
        images.append(F.normalize(model.encode_image(pixels).float(), dim=-1).cpu())
        texts.append(F.normalize(model.encode_text(tokenizer([s["caption"] for s in batch]).to(device)).float(), dim=-1).cpu())
        logits, labels = scale * images[-1] @ texts[-1].T, torch.arange(len(batch))
        losses.append(((F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2).item() * len(batch))
        batch.clear()

    for sample in reader:
        batch.append(sample)
        if len(batch) == cfg.batch_size:
            flush()
    if batch:
        flush()
    if not images:
        raise DataError(f"--val-data {cfg.val_data}: no readable image-caption pair ({reader.skips.summary()})")
    image_features, text_features = torch.cat(images), torch.cat(texts)
    metrics = clip_metrics(scale * image_features @ text_features.T)
    metrics["clip_val_loss"] = sum(losses) / len(image_features)
    metrics["num_samples"] = float(len(image_features))
    return {f"val/{k}": v for k, v in metrics.items()}


def clip_metrics(logits_per_image: torch.Tensor) -> dict[str, float]:
    """open_clip_train's `get_clip_metrics`: the rank of each query's own pair (0 is first) over its row."""
    metrics = {}
    for name, logit in (("image_to_text", logits_per_image), ("text_to_image", logits_per_image.T)):
        ranking = torch.argsort(logit, descending=True)
        preds = torch.where(ranking == torch.arange(len(logit)).view(-1, 1))[1].float()
        metrics[f"{name}_mean_rank"] = preds.mean().item() + 1
        metrics[f"{name}_median_rank"] = math.floor(preds.median().item()) + 1
        for k in (1, 5, 10):
            metrics[f"{name}_R@{k}"] = (preds < k).float().mean().item()
    return metrics
