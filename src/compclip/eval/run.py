"""`compclip eval`: one model, several benchmarks, one scorer shared by all of them."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..errors import DataError, MissingFileError, StorageError, UsageError
from ..io import sha256_of, write_json
from ..loggers import parse_reporters
from ..models.checkpoint import model_name, weights_file, weights_sha256
from ..models.released import get_released, is_released
from ..models.released import resolve as resolve_released
from ..options import make_options
from ..precision import resolve_device
from ..text import did_you_mean
from . import protocols, suites
from .base import REGISTRY, data_root, files_read
from .config import EvalConfig
from .items import SUFFIX as ITEMS_SUFFIX
from .items import relative_images, root_relative, write_items
from .scorer import UnreadableImagesError, load_scorer, model_scorer

if TYPE_CHECKING:
    from .pixels import SweepPixels

log = logging.getLogger("compclip.eval")


TIE_OPTIONS = ("official", *protocols.TIES)


@dataclasses.dataclass(frozen=True)
class Job:
    """One `--benchmark` item: a benchmark, the splits it names (none: all), and where its result goes."""

    label: str  # "sugarcrepe" or "sugarcrepe/swap_att"
    name: str
    splits: tuple[str, ...]

    @property
    def file(self) -> str:
        return self.label.replace("/", "-") + ".json"

    @property
    def items_file(self) -> str:
        return self.label.replace("/", "-") + ITEMS_SUFFIX


def resolve(items: str | list[str], root: Path | None = None) -> list[Job]:
    """`--benchmark` items as jobs: NAME or NAME/SPLIT (CLIP_benchmark's `sugar_crepe/swap_att`), each checked; `all`,
    every benchmark whose files are under `root` (none there: one line saying what each lacks)."""
    items = [n.strip() for n in (items.split(",") if isinstance(items, str) else items) if n.strip()]
    if "all" in items:
        if root is None:
            raise UsageError("--benchmark all takes the benchmarks whose files are under the data root: name them here")
        lacking = {name: bench.lacks(root, ()) for name, bench in sorted(REGISTRY.items())}
        items = [name for name, why in lacking.items() if why is None] + [i for i in items if i != "all"]
        if not items:
            raise MissingFileError(f"--benchmark all: no benchmark's files are under {root} (`compclip data check` says what each "
                                   f"lacks; first, {next(iter(lacking))}: {next(iter(lacking.values()))})")
    jobs = []
    for item in items:
        name, _, split = item.partition("/")
        if name not in REGISTRY and suites.benchmark_item(item) is not None:  # CLIP_benchmark's --dataset name, suite or list
            item = suites.benchmark_item(item)
            name, _, split = item.partition("/")
        if name not in REGISTRY:
            raise UsageError(f"unknown benchmark {name!r}{did_you_mean(name, [*REGISTRY, *suites.known_names()], n=2)}; known: "
                             f"{', '.join(sorted(REGISTRY))} (`compclip benchmarks` lists them){suites.DATASET_LISTING}")
        splits = REGISTRY[name].splits
        if split and split not in splits and not suites.selects(name, split):
            known = f"its splits: {', '.join(splits)}" if splits else "it has no splits"
            raise UsageError(f"--benchmark {item}: {name} has no split {split!r}{did_you_mean(split, splits, n=2)}; {known}")
        jobs.append(Job(item, name, (split,) if split else ()))
    if not jobs:
        raise UsageError(f"no benchmark given; known: {', '.join(sorted(REGISTRY))}")
    return list(dict.fromkeys(jobs))


def benchmark_options(jobs: list[Job], given: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """Each job's benchmark options from `{benchmark: {key: value}}` (`--bench-opt NAME.KEY=VALUE`)."""
    given = dict(given or {})
    stray = sorted(set(given) - {j.name for j in jobs})
    if stray:
        raise UsageError(f"--bench-opt {stray[0]}.*: {stray[0]} is not among the benchmarks run ({', '.join(j.label for j in jobs)})")
    return {j.name: make_options([REGISTRY[j.name].Options], given.get(j.name, {}), owner=f"benchmark {j.name}",
                                 flag=f"--bench-opt {j.name}.{{key}}", listing="compclip benchmarks")[0] for j in jobs}


def null_nans(metrics: dict[str, Any], prefix: str = "") -> tuple[dict[str, Any], list[str]]:
    """`metrics` with every NaN as None (strict JSON has no NaN), and the dotted paths of those metrics."""
    clean, nulls = {}, []
    for key, value in metrics.items():
        if isinstance(value, dict):
            clean[key], inner = null_nans(value, f"{prefix}{key}.")
            nulls += inner
        elif isinstance(value, float) and math.isnan(value):
            clean[key] = None
            nulls.append(f"{prefix}{key}")
        else:
            clean[key] = value
    return clean, nulls


def with_flat_splits(metrics: dict[str, Any]) -> dict[str, Any]:
    """`metrics` and, after them, each split's numbers again at the top as `<split>_<metric>` (`swap_att_acc`), as
    CLIP_benchmark writes its metrics flat: `clip_benchmark build` then has a number in every column it makes of them."""
    flat = {f"{split}_{key}": value for split, inner in metrics.items() if isinstance(inner, dict)
            for key, value in inner.items() if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))}
    return {**metrics, **{k: v for k, v in flat.items() if k not in metrics}}


def evaluated_nothing(record: dict[str, Any]) -> bool:
    """True when a result holds no score (scores are floats, counts ints): no example could be scored."""

    def scores(metrics: dict[str, Any]):
        for value in metrics.values():
            if isinstance(value, dict):
                yield from scores(value)
            elif isinstance(value, float):
                yield value

    return not any(True for _ in scores(record["metrics"]))


def check_options(cfg: EvalConfig):
    """Every option checked before a model is built or a file written: the benchmarks, their options, the data root."""
    cfg.check_values()
    every = "all" in [n.strip() for n in cfg.benchmark.split(",")]  # `all` reads the data root; a name is checked first
    jobs, root = None if every else resolve(cfg.benchmark), data_root(cfg.data_root)
    if not root.is_dir():
        raise MissingFileError(f"{root}: the data root is not a folder (--data-root or COMPCLIP_DATA)")
    jobs = jobs or resolve(cfg.benchmark, root)
    if cfg.out and Path(cfg.out).exists() and not Path(cfg.out).is_dir():
        raise UsageError(f"--out {cfg.out} is a file; results go into a folder")
    if cfg.ties not in TIE_OPTIONS:
        raise UsageError(f"--ties must be one of {', '.join(TIE_OPTIONS)}, not {cfg.ties!r}")
    if parse_reporters(cfg.report_to) and not cfg.out:
        raise UsageError(f"--report-to {cfg.report_to} logs the results written to --out: give --out")
    made = benchmark_options(jobs, cfg.bench_options)
    if cfg.out:
        check_writable(Path(cfg.out))  # last: it makes the folder
    return jobs, root, made


def check_writable(out: Path) -> None:
    """`--out` can take the results: checked before a model is loaded, so a long evaluation never ends unwritten."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-check-"):
            pass
    except OSError as e:
        raise UsageError(f"--out {out}: cannot write there ({type(e).__name__}: {e.strerror or e})") from None


def refuse_another_models(out: Path, model: str, pretrained: str | None, weights: str | None, force: bool) -> None:
    """A results folder holds one model's results: a result file there of other weights (by their SHA-256; by model and
    pretrained name where a side has no weights file) is not replaced in silence, unless `force`."""
    if force or not out.is_dir():
        return
    for file in sorted(out.glob("*.json")):
        try:
            record = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or "metrics" not in record:
            continue
        theirs = record.get("weights_sha256")
        same = theirs == weights if theirs and weights else (record.get("model"), record.get("pretrained") or None) == (model, pretrained)
        if not same:
            named = record.get("model") if not record.get("pretrained") else f"{record.get('model')} ({record.get('pretrained')})"
            raise UsageError(f"--out {out} holds results of another model: {file.name} is {named}'s; give each model its own --out "
                             "(`compclip report` compares folders), or --force to replace them")


def run_skipping_unreadable(bench, label: str, scorer, root: Path, ties: str, splits, options):
    """`bench.run`, again each time the scorer meets images that do not decode: the next run's `Missing` leaves them out
    (and names them); what was encoded stays in the scorer, so a run again only re-scores."""
    while True:
        known = set(getattr(scorer, "unreadable", {}))
        try:
            return bench.run(scorer, root, ties, splits, options)
        except UnreadableImagesError as e:
            if set(e.images) <= known:  # the benchmark asked for them again: it does not check its images
                raise DataError(f"{label}: {e}; the benchmark scores them without checking them first") from None
            log.warning("%s: %s; scoring again without them", label, e)


def evaluate(cfg: EvalConfig, pixels: SweepPixels | None = None) -> dict[str, dict[str, Any]]:
    """Run benchmarks and write `OUT/<benchmark>.json` (CLIP_benchmark's keys plus compclip's), one per `--benchmark` item.

    `ties`: official (each benchmark's own rule), strict or clip_benchmark for all. `device`: by default a GPU
    where torch sees one. `precision` fp32, amp_bf16 or amp (fp16); by default amp on a GPU, as CLIP_benchmark,
    and fp32 on the CPU, where autocast is only faster on CPUs with bf16 units and moves the scores.
    `bench_options`: `{benchmark: {key: value}}`, each benchmark's declared options. `pixels`: a sweep's decoded
    images (`compclip.eval.pixels`), shared with its other models of this model's preprocessing.
    """
    device = resolve_device(cfg.device)
    with left_empty_removed(Path(cfg.out) if cfg.out else None):
        jobs, root, made = check_options(cfg)
        return _evaluate(cfg, pixels, device, jobs, root, made)


@contextlib.contextmanager
def left_empty_removed(out: Path | None):
    """A results folder this run made is removed again when the run fails before writing into it (a mistyped model, a
    refused file): `compclip report results/*` then meets no empty folder."""
    made = out is not None and not out.exists()
    try:
        yield
    except BaseException:
        if made and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise


def _evaluate(cfg: EvalConfig, pixels: SweepPixels | None, device: str, jobs, root: Path, made) -> dict[str, dict[str, Any]]:
    model, pretrained, blip_score, out = model_name(cfg.model), cfg.pretrained, cfg.blip_score, Path(cfg.out)
    resolved = None
    if is_released(model):  # a released checkpoint's id: the architecture and file (or hub id) it loads as
        resolved = resolve_released(get_released(model), pretrained)
        model, pretrained, blip_score = resolved.model, resolved.pretrained, blip_score or resolved.blip_score
    file = weights_file(model, pretrained)  # refused before the model loads; checked again with the weights as loaded
    refuse_another_models(out, model, pretrained, sha256_of(file) if file else None, cfg.force)
    precision = cfg.precision or default_precision(device)
    scorer = load_scorer(model, pretrained, device=device, precision=precision, blip_score=blip_score, pixels=pixels,
                         **cfg.scorer_settings)
    if resolved is not None:  # its weights loaded: a first load's hash is recorded now, never a refused file's
        resolved.loaded()
    weights = weights_sha256(scorer.model)  # of the file as loaded: a checkpoint replaced meanwhile is not named by its successor
    # `pretrained` a string always, as CLIP_benchmark writes it (`clip_benchmark build` joins it to the model's name)
    head = {"model": model, "pretrained": pretrained or "", "weights_sha256": weights, "precision": precision}
    if is_released(model_name(cfg.model)):  # the papers' rows it is, and the activation it ran (`report --paper` compares both)
        entry = get_released(model_name(cfg.model))
        head.update(released=entry.id, **({"activation": entry.activation} if entry.activation else {}))
    records = run_jobs(scorer, jobs, root, made, head, cfg.ties, cfg.blind, out,
                       before_write=lambda: refuse_another_models(out, model, pretrained, weights, cfg.force))
    report(records, out, cfg)
    return records


def default_precision(device: str) -> str:
    """amp on a GPU, as CLIP_benchmark; fp32 on the CPU, where autocast is only faster with bf16 units and moves scores."""
    return "amp" if device.startswith("cuda") else "fp32"


def report(records: dict[str, dict[str, Any]], out: Path | None, cfg: EvalConfig) -> None:
    """--report-to: the results, their figures and the wrong items to the loggers named."""
    reporters = parse_reporters(cfg.report_to)
    if reporters and out is not None:
        from .to_loggers import log_results

        log_results(records, out, reporters, cfg.wandb_project_name)


def evaluate_model(model, preprocess, tokenizer, benchmarks: str | list[str] | tuple[str, ...],
                   data_root: str | Path | None = None, out: str | Path | None = None, *, name: str | None = None,
                   method=None, device: str | None = None, **options: Any) -> dict[str, dict[str, Any]]:
    """`compclip eval` on a model in memory: an open_clip model, a transformers CLIP/SigLIP model, or any module with
    `encode_image` and `encode_text`. Returns `{benchmark: record}` and, given `out`, writes the same JSON files.

    `benchmarks`: `--benchmark`'s names (NAME or NAME/SPLIT), a list or one comma-joined string. `preprocess` turns a
    PIL image into a tensor and `tokenizer` a list of texts into token ids, as open_clip's
    `create_model_and_transforms` and `get_tokenizer` give them. `name` is the model's name in the records (default: its
    class). `method`: the `compclip.methods` method it was trained with, when that brings its own scorer (OC-CLIP).
    `device`: default, where the model's weights are. `options`: `compclip eval`'s other options by name (`ties`,
    `bench_options`, `batch_size`, `workers`, `cache`, `precision`, `blind`, `force`, `report_to`). Give each model its
    own `name` where several share a results folder: a model in memory has no weights file to tell it by.
    """
    from ..models.towers import two_towers

    if options.get("blip_score") is not None:
        raise UsageError("blip_score chooses the head of a BLIP model `compclip eval --model` loads; a model in memory is "
                         "scored by its two towers")
    net = two_towers(model)
    refuse_unusable_model(net, preprocess)
    device = device or str(next(net.parameters()).device)
    cfg = EvalConfig(model=name or type(model).__name__, benchmark=joined_benchmarks(benchmarks), out=str(out) if out is not None else "",
                     data_root=None if data_root is None else str(data_root), device=device, **options)
    jobs, root, made = check_options(cfg)
    precision = cfg.precision or default_precision(device)
    with modes_kept(model, net, method):
        scorer = model_scorer(net, preprocess, tokenizer, method, device=device, precision=precision, **cfg.scorer_settings)
        head = {"model": cfg.model, "pretrained": "", "weights_sha256": weights_sha256(net), "precision": precision,
                **({"name": name} if name else {})}  # what `load_results` calls the folder
        folder = Path(out) if out is not None else None
        records = run_jobs(scorer, jobs, root, made, head, cfg.ties, cfg.blind, folder,
                           before_write=lambda: refuse_another_models(folder, cfg.model, None, head["weights_sha256"], cfg.force))
    report(records, folder, cfg)
    return records


def joined_benchmarks(benchmarks: str | list[str] | tuple[str, ...]) -> str:
    """`benchmarks` as `--benchmark` takes them, comma-joined: a library caller's list of names is as good as the
    command line's string."""
    names = benchmarks if isinstance(benchmarks, (list, tuple)) else [benchmarks]
    for name in names:
        if not isinstance(name, str):
            raise UsageError(f"benchmarks: {name!r} is not a benchmark's name (NAME or NAME/SPLIT); give a list of names or "
                             "one comma-joined string, e.g. ['sugarcrepe', 'winoground']")
    return ",".join(names)


@contextlib.contextmanager
def modes_kept(*modules):
    """Each submodule's train or eval mode as it was before scoring set them all to eval: a model evaluated inside a
    user's training loop goes on training as it did (its dropout on, a tower its trainer locked still in eval)."""
    modes = [(part, part.training) for module in modules if module is not None for part in module.modules()]
    try:
        yield
    finally:
        for part, training in modes:
            part.training = training


def refuse_unusable_model(net, preprocess) -> None:
    """One line, before any data is read, for a model in memory that cannot be scored as handed: weights on the meta
    device (built without them), or a `preprocess` whose images are not the size its vision tower takes."""
    if any(p.is_meta for p in net.parameters()):
        raise UsageError("the model's weights are on the meta device (built without them): load its weights first "
                         "(`model.to_empty(device=...)` and `load_state_dict`), then evaluate")
    size = getattr(getattr(net, "visual", None), "image_size", None)
    if size is None:
        return
    from PIL import Image

    want = tuple(size) if isinstance(size, (tuple, list)) else (size, size)
    got = tuple(preprocess(Image.new("RGB", (37, 29))).shape[-2:])
    if got != want:
        raise UsageError(f"preprocess makes {got[0]}x{got[1]} images and the model's vision tower takes {want[0]}x{want[1]}: "
                         "give the preprocess made with this model (open_clip's `create_model_and_transforms`)")


def run_jobs(scorer, jobs: list[Job], root: Path, made: dict[str, Any], head: dict[str, Any], ties: str, blind: bool,
             out: Path | None, before_write=lambda: None) -> dict[str, dict[str, Any]]:
    """Each job's result record (`head`: the model's fields), written to `out/<job>.json` where `out` is given. A job
    whose files are absent or unusable (a file that is not of its benchmark's format) scores nothing, says why under
    `lacks`, and leaves the other jobs to run."""
    if blind and not hasattr(scorer, "blind"):
        raise UsageError(f"--blind replaces each image by the mean of the benchmark's images: {head['model']}'s scorer "
                         f"({type(scorer).__name__}) has no such mean")
    records = {}
    for job in jobs:
        bench = REGISTRY[job.name]
        rule = bench.ties if ties == "official" else ties
        record: dict[str, Any] = {"dataset": job.label, "model": head["model"], "pretrained": head["pretrained"],
                                  "weights_sha256": head["weights_sha256"], "task": bench.task, "ties": rule, "ties_option": ties,
                                  "precision": head["precision"], "compclip_version": __version__,
                                  "options": dataclasses.asdict(made[job.name]), "data_root": str(root.resolve()),
                                  **{key: head[key] for key in ("name", "released", "activation") if key in head}}
        record["departures"] = bench.departures(made[job.name], rule, head["pretrained"], job.splits)
        for departure in record["departures"]:
            log.warning("%s departs from the official protocol: %s", job.label, departure)
        lacks = bench.lacks(root, job.splits)
        if not lacks:
            try:
                fields, items = score_job(scorer, bench, job, root, rule, made[job.name], blind)
                record.update(fields)
                items = relative_images(items, root)
            except (DataError, MissingFileError) as e:  # this benchmark's files are unusable: the next ones are still scored
                lacks = str(e)
        if lacks:
            log.error("%s: cannot run: %s", job.label, lacks)
            record.update(metrics={}, complete=False, lacks=lacks)
        if out is not None:
            before_write()  # again: another eval may have begun meanwhile
            write_result(out, job, record, None if lacks else items)
        records[job.label] = record
    log.info("encoded %d images and %d captions", scorer.encoded["images"], scorer.encoded["texts"])
    if getattr(scorer, "pixels", None) is not None:
        log.info("decoded %d images, took %d more as the sweep's models of the same preprocessing decoded them",
                 scorer.decoded["decoded"], scorer.decoded["shared"])
    return records


def write_result(out: Path, job: Job, record: dict[str, Any], items: list[dict[str, Any]] | None) -> None:
    """A job's result JSON and its items file, both or neither, so that a result JSON stands only beside its own items
    (what `compare`, the report and a demo's rerun take it to mean): the items first (a full disk there keeps an
    earlier run's pair as it was), then the result, last; a result that cannot be written takes the new items with it.
    `items` None: a result that scored nothing, written without any (another run's would stand beside it)."""
    result, rows = out / job.file, out / job.items_file
    if items is not None:
        write_items(rows, items)
    result.unlink(missing_ok=True)  # an earlier run's, whose items are replaced now
    if items is None:
        rows.unlink(missing_ok=True)
    try:
        write_json(result, record)
    except StorageError as e:
        rows.unlink(missing_ok=True)
        raise StorageError(f"{e}; nor is {rows.name} kept without it: run the same command again once there is room") from None


_HASHED: dict[tuple[str, int, int], str] = {}  # (file, size, modified): SHA-256, each file hashed once a process (a sweep)


def files_hashed(files: set[Path], root: Path) -> dict[str, str]:
    """The SHA-256 of each data file a benchmark read (`files_read`; its images are not among them), by its path relative to
    the data root (absolute where it lies elsewhere): `report --paper` tells a copy of a benchmark from its release by them."""
    hashed = {}
    for file in sorted(f for f in files if f.is_file()):
        stat = file.stat()
        key = (str(file.resolve()), stat.st_size, stat.st_mtime_ns)
        if key not in _HASHED:
            _HASHED[key] = sha256_of(file)
        hashed[root_relative(file, root)] = _HASHED[key]
    return hashed


def score_job(scorer, bench, job: Job, root: Path, rule: str, options: Any, blind: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The scored fields of one job's record (metrics, completeness, what was missing, the blind scores), and its items."""
    fields: dict[str, Any] = {}
    start = time.perf_counter()
    with scorer.asked() if blind else contextlib.nullcontext(set()) as asked, scorer.labelled(job.label), files_read() as read:
        result = run_skipping_unreadable(bench, job.label, scorer, root, rule, job.splits, options)
    fields["files"] = files_hashed(read, root)
    if blind and asked:
        with scorer.blind(asked), scorer.labelled(f"{job.label} (blind)"):
            fields["blind"] = with_flat_splits(null_nans(bench.run(scorer, root, rule, job.splits, options).metrics)[0])
        if len(asked) == 1:
            fields["blind_images"] = 1
            log.warning("%s: --blind: the benchmark scored one image, so its mean is that image and the blind "
                        "score equals the real one by construction; it says nothing of the text prior", job.label)
    metrics, nulls = null_nans(result.metrics)
    fields.update(metrics=with_flat_splits(metrics), complete=result.complete, missing_images=result.missing.as_record(),
                  absent=result.absent, seconds=round(time.perf_counter() - start, 3))
    if nulls:
        fields["null_metrics"] = {"metrics": nulls, "why": "no example could be scored: its images are missing "
                                  "(see missing_images), its files are absent (see absent) or the split has no examples"}
    if result.missing.files:
        # every one named, with why: a sweep run again scores this result anew only once one of them is there (`sweep.kept`)
        fields["missing_files"] = dict(result.missing.files)
        report = result.missing.as_record()
        log.warning("%s: %d images missing, e.g. %s: results cover the rest and are marked incomplete",
                    job.label, report["count"], ", ".join(report["examples"]))
    for part, why in result.absent.items():
        log.warning("%s: %s %s: results cover the rest and are marked incomplete", job.label, part, why)
    return fields, result.items
