"""`compclip demo` (what `make demo` runs): the whole method end to end on the binding world.

1. generate the world (cached; `WORLD`: two objects a scene, half the captions statements in the tests' form);
2. extract the training captions' concepts (cached): noun phrases, POS tags, scene graphs;
3. the base: a small model (`compclip-tiny-world`: a conv stem under a 2-block ViT with SigLIP's attention-pool head,
   CLIP's causal text tower) pretrained from scratch with the plain SigLIP
   loss, shape first (`CURRICULUM`): single objects with captions that name only the shape ("a star"), then
   with "a red star", "a star" and "something red" in turn, then the world's scenes with the single objects
   interleaved (colour alone would win the contrastive task and starve shape, and scenes alone make it
   forget shape, `docs/benchmarks.md`). For the default world compclip ships that base (`pack_base`, made by
   `research/pack_base.py`), installed in a second; any other world, or `--rebuild-base`, pretrains it here;
4. fine-tune that base once per method and seed (by default SigLIP, the positive control attswap, whose seen
   swap-attribute says whether the world can show binding at all, and C2LIP, with seed 0; `--methods` adds the
   peers: hardneg, negclip, clic, occlip) with equal steps and learning rate; on a GPU the runs train at once, each in
   a process of its own (`--jobs`), while this one scores the base;
5. evaluate every model on the seen and unseen test splits and print the comparison: the mean over
   seeds with its 95 % interval, and each method's paired difference from the first, marked
   significant only when its interval excludes zero. It writes
   `results/<model>[-s<seed>]/<split>/<benchmark>.json`, `report/report.md`, `report/seeds.md`,
   `report/seeds.json` and the plots under `--out`; `report/seeds.md` shows the attention figure and any
   binding curve `research/world_sweep.py --demo OUT` drew there.
The world and the base are made once, with the first seed; the seeds repeat the fine-tuning. So the intervals say
what re-running the fine-tunes would show, not what a re-drawn world and a re-built base would: with `world_seeds`
(`--world-seeds 0,1,2`) the demo draws each world and pretrains its own base on it (the first in `out`, the others
in `out/worlds/seed-<w>/`), and its table is over the worlds, each world's mean over the seeds, differences paired
world by world; each world's own table over seeds follows it in `report/seeds.md`.
Every stage is skipped when its output exists, so a re-run reuses what was done.
"""
from __future__ import annotations

import itertools
import json
import os
import time
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from .errors import DataError, UsageError
from .io import atomic_path, write_json
from .options import option, parse_value
from .plots import interval_bars
from .stats import fmt, fmt_difference, interval, paired

MODEL = "compclip-tiny-world"
SINGLES = 8000  # single objects for the base, fewer in a world of fewer training scenes
# The demo's world, where `WorldConfig` differs: two objects a scene, so that a swap of their colours is exactly one false
# scene, and half of the captions statements in the tests' own form (docs/history.md: with long captions alone the
# positive control binds captions in their form and not the tests' short statements).
WORLD = {"min_objects": 2, "max_objects": 2, "statements": 0.5}
# The base's runs, in order: (run, training data, caption field, learning rate, schedule, warm-up, steps by default).
CURRICULUM = (
    ("base-shapes", "singles", "shape_caption", 1e-3, "const", 100, 600),
    ("base-singles", "singles", "caption", 1e-3, "cosine", 20, 1800),
    ("base", "train::singles", "caption", 5e-4, "cosine", 20, 1000),
)
PRETRAIN_STEPS = sum(run[-1] for run in CURRICULUM)  # --pretrain-steps scales every run's share of it
PRETRAIN_BATCH = 128
SHIPPED_BASE = Path(__file__).parent / "demo_base"  # `pack_base`'s output: the base the default world's demo would pretrain
# Every method's fine-tune from the base, here and in research/world_ablation.py (steps and batch: run_demo's defaults):
# 64,000 images, the fewest at which the positive control binds run after run (32,000 bound in some runs and not in
# others; docs/history.md).
METHODS, SEEDS = "siglip,attswap,c2lip", "0"  # what the demo compares by default, and over which fine-tuning seeds
FINE_TUNE = {"steps": 1000, "batch_size": 64, "lr": 1e-3, "warmup": 20, "optimizer": "adamw"}
# Every run's reading and saving: the world's scenes are drawn at random, so file order is already shuffled (and `::`
# sources stay evenly mixed); only the final checkpoint is kept.
RUN_OPTIONS = {"shuffle": 0, "save_every": 10**9, "keep": 1}
BENCHMARKS = "sugarcrepe,sugarcrepe_pp,zeroshot,retrieval"
SPLITS = ("seen", "unseen")
COLUMNS = ("SC add", "SC replace", "SC swap", "SC swap-att", "SC++ ITT", "SC++ TOT", "ZS shape", "ZS colour",
           "retrieval R@1", "retrieval R@5")  # report columns (`compclip.eval.report.columns()`)


def _train(out: Path, **kwargs) -> Path:
    """Train unless `out` already has its final checkpoint; returns the checkpoint folder."""
    from .models.checkpoint import RunFolder
    from .train import TrainConfig, train

    final = RunFolder(out).step(kwargs["steps"])
    if not final.is_dir():
        train(TrainConfig(out=str(out), **kwargs))
    return final


def _score(checkpoint: str, folder: Path, **kwargs) -> None:
    """The demo's benchmarks of `checkpoint` into `folder`, unless every one is there (`kwargs`: `EvalConfig`'s)."""
    from .eval import EvalConfig, evaluate

    if not all((folder / f"{b}.json").is_file() for b in BENCHMARKS.split(",")):
        evaluate(EvalConfig(checkpoint, BENCHMARKS, str(folder), **kwargs))


def at_once(fn: Callable[..., Any], calls: list[dict[str, Any]], jobs: int, meanwhile: Callable[[], None] | None = None,
            done: Callable[[int], None] | None = None) -> list[Any]:
    """`fn(**call)` for each of `calls`, in order: one after another here, or with `jobs` > 1 that many at once, each in a
    spawned process (CUDA cannot be forked) whose progress bars are hidden, `done(i)` said here as call i ends (after
    `meanwhile`) so that minutes do not pass without a line; `meanwhile()` runs here while they do (before them where
    they run here). A failure is raised here once the others have ended."""
    if jobs <= 1 or len(calls) <= 1:
        if meanwhile is not None:
            meanwhile()
        return [fn(**call) for call in calls]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    jobs = min(jobs, len(calls))
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_job_start,
                             initargs=(job_threads(jobs),)) as pool:
        futures = {pool.submit(fn, **call): i for i, call in enumerate(calls)}
        if meanwhile is not None:
            meanwhile()
        for future in as_completed(futures) if done is not None else ():
            if future.exception() is None:
                done(futures[future])
        return [future.result() for future in futures]


def job_threads(jobs: int) -> int:
    """The CPU threads each of `jobs` processes at once gets: this machine's cores (those this process may run on, as
    SLURM or taskset allow) shared between them and this one, as torchrun does for its ranks. Each would otherwise take
    every core for torch's intra-op threads, and on a GPU, where a tiny model's step waits on the CPU, the processes'
    spinning threads starve each other."""
    return max(1, len(os.sched_getaffinity(0)) // (jobs + 1))


def _job_start(threads: int) -> None:
    import torch

    from .progress import configure

    configure(True)
    torch.set_num_threads(threads)


@dataclass(frozen=True)
class DemoConfig:
    """`compclip demo`'s options, declared once: the command line is generated from them."""

    out: str = option("runs/demo", "Where the world, runs, results and report go (re-runs reuse them).")
    methods: str = option(METHODS, "Comma-separated fine-tuning methods compared from the same base (`compclip methods` lists them).")
    n_train: int = option(20_000, "Training scenes.")
    n_test: int = option(1250, "Scenes per test split (1,250: one seed's standard error on swap-attribute <= 1.5 points).")
    pretrain_steps: int = option(PRETRAIN_STEPS, "SigLIP steps of the base from scratch, over its curriculum (shapes first).")
    pretrain_batch_size: int = option(PRETRAIN_BATCH, "Images per step of the base's pretraining.")
    steps: int = option(FINE_TUNE["steps"], "Fine-tuning steps per method.")
    batch_size: int = option(FINE_TUNE["batch_size"], "Images per step.")
    seeds: str = option(SEEDS, "Comma-separated fine-tuning seeds; the first also seeds the base and, without --world-seeds, the world.")
    workers: int = option(2, "DataLoader workers and rendering processes.")
    jobs: int | None = option(None, "Fine-tuning runs trained at once, each in a process of its own (a GPU's tiny-model steps wait on "
                                    "the host, so runs side by side fill it).  [default: every run at once on a GPU, one at a time "
                                    "on a CPU]")
    world: dict[str, Any] = option(help="A world setting KEY=VALUE other than the demo's (two objects a scene, statements=0.5), e.g. "
                                        "heldout=0.5, colors=4, statements=0, or min_objects=1 max_objects=4 (repeatable; see "
                                        "`compclip world generate --help`).",
                                   factory=dict)
    device: str | None = option(None, "cpu or cuda: where every model trains and is scored, in fp32.  [default: cuda if a GPU is visible]")
    world_seeds: str | None = option(None, "Comma-separated world draws, each with its own base (the first in --out, the others in "
                                           "OUT/worlds/seed-W): the table is then over worlds, each world's mean over --seeds.  "
                                           "[default: one world, drawn with the first of --seeds]")
    rebuild_base: bool = option(False, "Pretrain the base here even where compclip ships it (the default world's: about 15 minutes "
                                        "on 2 cores).")
    study: bool = option(False, "The study's protocol in one flag: every method with the positive control, seeds 0,1,2 in each of "
                                "worlds 0,1,2 (the papers' baselines among them: about 12 hours on 2 cores; one world a machine: "
                                "research/study_table.py).")


def run_demo(cfg: DemoConfig = DemoConfig()) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Returns {model: {split: {column: one value per seed}}}, or with several `world_seeds` one value per world
    (the mean over its seeds)."""
    from .eval import build_report

    methods, seeds, world_seeds = study_protocol(cfg.methods, cfg.seeds, cfg.world_seeds) if cfg.study else (cfg.methods, cfg.seeds,
                                                                                                              cfg.world_seeds)
    out, n_test, world = Path(cfg.out), cfg.n_test, world_options(cfg.world)
    console, start = log_console(), time.time()
    draws = world_draws(out, world_seeds, seeds, world)
    by_world, runs, folders = {}, {}, []
    for w, folder in draws.items():
        numbers, world_runs, world_folders = compare_methods(folder, methods, cfg.n_train, n_test, cfg.pretrain_steps, cfg.steps,
                                                             cfg.batch_size, seeds, cfg.workers, {**world, "seed": w}, SPLITS, console,
                                                             cfg.device, cfg.rebuild_base, cfg.pretrain_batch_size, cfg.jobs)
        by_world[w] = numbers
        if not runs:  # the report and the attention figure are the first world's
            runs, folders = world_runs, world_folders
    report = build_report(folders, out / "report")
    scope = f"{n_test} test scenes per split"
    numbers, markdown = tabulate(by_world, seeds, scope, out / "report", console)
    if {"c2lip-ft", "siglip-ft"} <= set(runs):
        seed = next(iter(runs["base"]))  # the first seed's models
        figure, concept = held_out_attention(out / "world", runs["c2lip-ft"][seed], runs["siglip-ft"][seed],
                                             out / "report" / "attention.png")
        markdown += f"\n![attention of {concept!r}, C2LIP vs SigLIP fine-tuning, on an unseen scene](attention.png)\n"
        console.print(f"attention of the held-out {concept!r} on an unseen scene, C2LIP vs SigLIP fine-tuning: {figure}")
    for curve in sorted((out / "report").glob("binding_curve_*.png")):  # drawn by research/world_sweep.py --demo OUT
        markdown += f"\n![unseen swap-attribute as the world's {curve.stem[14:]} moves]({curve.name})\n"
    write_seeds_report(out / "report", markdown, seeds, scope, by_world, numbers)
    console.print(f"results in {out / 'results'}, report in {report}; {time.time() - start:.0f} s")
    return numbers


def tabulate(by_world: dict[int, dict[str, dict[str, dict[str, list]]]], seeds: str, scope: str, report: Path,
             console: Console) -> tuple[dict[str, dict[str, dict[str, list]]], str]:
    """The demo's table over `seeds` (one world) or over the worlds (each world's mean over its seeds, then each
    world's own table), printed with its reading and drawn in `report/seeds.png`: returns the numbers tabulated and
    the Markdown."""
    if len(by_world) == 1:
        numbers = next(iter(by_world.values()))
        title, figure = f"binding world: accuracy / recall in %, mean ± 95 % interval over seeds {seeds} ({scope})", f"seeds {seeds}"
    else:
        numbers, worlds = world_means(by_world), ",".join(map(str, by_world))
        title = (f"binding worlds {worlds}, each with its own base: accuracy / recall in %, mean ± 95 % interval over the worlds "
                 f"of each world's mean over seeds {seeds} ({scope})")
        figure = f"worlds {worlds} (each the mean of seeds {seeds})"
    table, markdown = seed_table(numbers, title)
    if len(by_world) > 1:
        for w, world_numbers in by_world.items():
            markdown += "\n" + seed_table(world_numbers, f"world {w} alone: mean ± 95 % interval over seeds {seeds}")[1]
    if console.is_terminal:
        console.print(table)
    else:  # a log: rich would draw the table 80 columns wide there, every cell cut to "sig…"
        console.print(markdown, markup=False, highlight=False)
    if CONTROL in numbers:
        said = reading(numbers)
        markdown += f"\n{said}\n"
        console.print(said)
    interval_bars(numbers, list(COLUMNS), report / "seeds.png", f"binding world: mean ± 95 % interval over {figure}")
    markdown += "\n![each model's mean and 95 % interval, seen (solid) beside unseen (hatched)](seeds.png)\n"
    return numbers, markdown


def write_seeds_report(report: Path, markdown: str, seeds: str, scope: str, by_world: dict, numbers: dict) -> None:
    """`report/seeds.md` and `report/seeds.json`: every world's numbers seed by seed, from which
    `research/study_table.py` tabulates worlds run apart."""
    with atomic_path(report / "seeds.md") as tmp:
        tmp.write_text(markdown, encoding="utf-8")
    write_json(report / "seeds.json", {"seeds": parse_seeds(seeds, "--seeds"), "world_seeds": list(by_world), "scope": scope,
                                       "results": _strict(numbers), "by_world": {str(w): _strict(n) for w, n in by_world.items()}})


def _strict(numbers: dict) -> dict:
    """Strict JSON: a metric a benchmark lacks (NaN) is null."""
    return {m: {sp: {h: [None if v != v else v for v in vs] for h, vs in cols.items()} for sp, cols in by.items()}
            for m, by in numbers.items()}


STUDY = {"methods": "siglip,attswap,c2lip,hardneg,clic,occlip,ceclip,svlc,dac,conclip,tripletclip", "seeds": "0,1,2",
         "world_seeds": "0,1,2"}


def study_protocol(methods: str, seeds: str, world_seeds: str | None) -> tuple[str, str, str]:
    """`--study`: the study's methods, seeds and worlds; refused beside a choice of its own of any of the three."""
    given = {"--methods": methods != METHODS, "--seeds": seeds != SEEDS, "--world-seeds": world_seeds is not None}
    if any(given.values()):
        raise UsageError(f"--study sets the methods, seeds and worlds itself: drop {', '.join(k for k, v in given.items() if v)}")
    return STUDY["methods"], STUDY["seeds"], STUDY["world_seeds"]


def parse_seeds(text: str, flag: str) -> list[int]:
    """Comma-separated distinct integers of at least 0 (numpy's generators take no negative seed)."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise UsageError(f"{flag}: expected comma-separated integers, not {text!r}") from None
    if len(set(values)) != len(values):
        raise UsageError(f"{flag}: {text!r} repeats a seed")
    if min(values) < 0:
        raise UsageError(f"{flag}: {text!r}: a seed is at least 0")
    return values


def world_draws(out: Path, world_seeds: str | None, seeds: str, world: dict[str, Any] | None) -> dict[int, Path]:
    """{world seed: its folder}: the first world in `out` (so that a one-world demo folder is reused), each other in
    `out/worlds/seed-<w>`. Without `world_seeds`, one world, seeded as `world` says or by the first of `seeds`."""
    if world_seeds is None:
        return {(world or {}).get("seed", parse_seeds(seeds, "--seeds")[0]): out}
    if "seed" in (world or {}):
        raise UsageError("--world-seeds and the world's own seed both set the draw: give one")
    first, *others = parse_seeds(world_seeds, "--world-seeds")
    return {first: out, **{w: out / "worlds" / f"seed-{w}" for w in others}}


def world_means(by_world: dict[int, dict[str, dict[str, dict[str, list]]]]) -> dict[str, dict[str, dict[str, list]]]:
    """{model: {split: {column: one value per world}}}: each world's mean over its seeds ("n/a" stays "n/a"), so that
    an interval over them, and a paired difference world by world, speak for a re-drawn world and a re-built base."""
    means: dict[str, dict[str, dict[str, list]]] = {}
    for numbers in by_world.values():
        for model, by_split in numbers.items():
            for split, columns in by_split.items():
                for column, values in columns.items():
                    value = values[0] if any(isinstance(v, str) for v in values) else sum(values) / len(values)
                    means.setdefault(model, {}).setdefault(split, {}).setdefault(column, []).append(value)
    return means


def world_options(given: dict[str, Any]) -> dict[str, Any]:
    """`--world KEY=VALUE` pairs as `WorldConfig` fields, each parsed as its declared type."""
    from .world import WorldConfig

    fixed = {"seed": "--seeds or --world-seeds", "n_train": "--n-train", "n_test": "--n-test", "size": "64 pixels"}
    kinds = typing.get_type_hints(WorldConfig)
    options: dict[str, Any] = {}
    for key, value in given.items():
        name = key.replace("-", "_")
        if name not in kinds or name in fixed:
            known = ", ".join(k for k in kinds if k not in fixed)
            raise UsageError(f"--world {key}={value}: expected KEY=VALUE with KEY one of {known}"
                             + (f" ({name} is set by {fixed[name]})" if name in fixed else ""))
        options[name] = parse_value(value, kinds[name], f"--world {name}") if isinstance(value, str) else value
    return options


def world_config(world: dict[str, Any] | None, seed: int, n_train: int, n_test: int):
    """The demo's world: `WORLD`, then `world`'s settings (a seed there wins over `seed`) at the given sizes, 64 px, with
    single objects for the base."""
    from .world import WorldConfig

    return WorldConfig(**{"seed": seed, "n_singles": min(SINGLES, n_train), **WORLD, **(world or {}), "n_train": n_train,
                          "n_test": n_test, "size": 64})


def log_console() -> Console:
    """The demo's console; lines are not wrapped at 80 columns where it writes to a log."""
    return Console(soft_wrap=True)


def compare_methods(
    out: Path, methods: str, n_train: int, n_test: int, pretrain_steps: int, steps: int, batch_size: int, seeds: str, workers: int,
    world: dict[str, Any] | None = None, splits: tuple[str, ...] = SPLITS, console: Console | None = None, device: str | None = None,
    rebuild_base: bool = False, pretrain_batch_size: int = PRETRAIN_BATCH, jobs: int | None = 1,
) -> tuple[dict[str, dict[str, dict[str, list[float]]]], dict[str, dict[int, Path]], list[Path]]:
    """Stages 1-5 of the demo on one world (`world`: `WorldConfig` fields other than the defaults; its seed is the
    first of `seeds` unless `world` names one) in `out`, every model trained and scored in fp32 on `device` (cpu or cuda;
    None: cuda where a GPU is visible), `jobs` fine-tunes at once (None: `DemoConfig.jobs`' default):
    returns the numbers {model: {split: {column: one value per seed}}}, the checkpoints {model: {seed: folder}}
    and the result folders."""
    from .concepts import build_store, iter_captions
    from .eval.report import column_value
    from .methods import list_methods, method_concept_fields
    from .world import generate

    for flag, value in (("--pretrain-steps", pretrain_steps), ("--pretrain-batch-size", pretrain_batch_size), ("--steps", steps),
                        ("--batch-size", batch_size), ("--workers", workers), ("--jobs", 1 if jobs is None else jobs)):
        if value < 1:
            raise UsageError(f"{flag} must be at least 1, not {value}")
    seed_list = parse_seeds(seeds, "--seeds")
    seed = seed_list[0]
    device = run_device(device)
    unknown = [m for m in methods.split(",") for part in m.split("+") if part not in list_methods()]
    if unknown:
        raise UsageError(f"--methods: unknown {unknown}; known: {', '.join(list_methods())}")
    named = methods.split(",")
    twice = sorted({m for m in named if named.count(m) > 1})
    if twice:
        raise UsageError(f"--methods {methods}: names {', '.join(twice)} twice (its runs would share one folder)")
    console = console or log_console()
    cfg = world_config(world, seed, n_train, n_test)
    if cfg.n_singles < 1:
        raise UsageError("the base pretrains on the world's single objects: --world n_singles must be at least 1")
    manifest = out / "world" / "manifest.json"
    if (out / "train").is_dir() and manifest.is_file() and json.loads(manifest.read_text())["config"] != asdict(cfg):
        raise UsageError(f"{out}: its world was made with other settings than these, and its models were trained on it; "
                         "choose another --out (or delete this one)")
    world_dir = generate(out / "world", cfg, workers)
    console.print(f"[1/5] binding world in {world_dir} ({n_train} training scenes, {n_test} per test split)")
    images = world_dir / "train" / "images.npy"
    # every registered method's fields, so that one store serves any --methods (and a re-run with others)
    fields = {f for m in list_methods() for f in method_concept_fields(m)}
    scenes = world_dir / "train" / "scenes.jsonl"  # and its negatives' captions, whose swaps NegCLIP's hard images bring
    build_store(itertools.chain(iter_captions(scenes), iter_captions(scenes, "negative_caption")), out / "concepts", fields,
                workers=workers)
    console.print(f"[2/5] concepts of the training captions and their negatives' in {out / 'concepts'}")
    common = {"train_data": str(images), "batch_size": batch_size, "seed": seed, "workers": workers, "device": device, **RUN_OPTIONS}
    base, how = pretrain_base(out / "train", world_dir, cfg, pretrain_steps, dict(common, batch_size=pretrain_batch_size), rebuild_base)
    console.print(f"[3/5] base {how}: {base}")
    runs = {"base": {seed: base}}  # model: {seed: checkpoint}

    def results(name: str, s: int) -> Path:  # the first seed keeps the folder names of a single-seed run
        return out / "results" / (name if s == seed else f"{name}-s{s}")

    def scores(name: str, s: int) -> list[dict[str, Any]]:  # `_score`'s calls for a model, a split each
        return [{"folder": results(name, s) / split, "data_root": str(world_dir / f"test_{split}"), "workers": workers,
                 "device": device, "precision": "fp32"} for split in splits]

    def score_base() -> None:  # here, while the fine-tunes train where they train at once
        for score in scores("base", seed):
            _score(str(base), **score)

    fine_tunes = {(f"{method}-ft", s): {"out": out / "train" / f"{method}{'' if s == seed else f'-s{s}'}", "method": method,
                                        "model": str(base), "concepts": str(out / "concepts"),
                                        **{**FINE_TUNE, **common, "steps": steps, "seed": s}}
                  for method in methods.split(",") for s in seed_list}
    jobs = min(len(fine_tunes), (len(fine_tunes) if device == "cuda" else 1) if jobs is None else jobs)
    done = None
    if jobs > 1:
        console.print(f"fine-tuning {len(fine_tunes)} runs, {jobs} at once, each in a process of its own (--jobs)")
        started, labels = time.monotonic(), [f"{name} (seed {s})" for name, s in fine_tunes]
        done = lambda i: console.print(f"  {labels[i]} fine-tuned, {time.monotonic() - started:.0f} s")  # noqa: E731
    # the runs' scoring stays here, after them: a stop reaches a run's process in training, which answers it itself
    for (name, s), final in zip(fine_tunes, at_once(_train, list(fine_tunes.values()), jobs, score_base, done), strict=True):
        runs.setdefault(name, {})[s] = final
        for score in scores(name, s):
            _score(str(final), **score)
    console.print(f"[4/5] fine-tuned {', '.join(methods.split(','))} from the base, {steps} steps each, seeds {seeds}")
    folders, numbers = [], {}
    for name, by_seed in runs.items():
        for s in by_seed:
            for split in splits:
                folder = results(name, s) / split
                records = {b: json.loads((folder / f"{b}.json").read_text()) for b in BENCHMARKS.split(",")}
                for h in COLUMNS:
                    numbers.setdefault(name, {}).setdefault(split, {}).setdefault(h, []).append(column_value(records, h))
                folders.append(folder)
    console.print(f"[5/5] evaluated every model on the {' and '.join(splits)} split{'s' * (len(splits) > 1)}")
    return numbers, runs, folders


def pretrain_base(train: Path, world_dir: Path, cfg, pretrain_steps: int, common: dict[str, Any], rebuild: bool) -> tuple[Path, str]:
    """The base's checkpoint in `train/base`, and how it came there: the shipped base where it was made on this very
    world by this curriculum (`shipped_fits`), installed in a second, unless `rebuild`; else `CURRICULUM`'s runs from
    scratch (or what a re-run finds of them)."""
    from .models.checkpoint import RunFolder, read_config

    steps = [max(1, round(pretrain_steps * run[-1] / PRETRAIN_STEPS)) for run in CURRICULUM]
    final = RunFolder(train / CURRICULUM[-1][0]).step(steps[-1])
    shipped = final.is_dir() and "shipped" in read_config(final)
    if rebuild and shipped:
        raise UsageError(f"{final} holds the shipped base: --rebuild-base pretrains one in another --out")
    if not rebuild and not final.is_dir() and shipped_fits(cfg, pretrain_steps, common["batch_size"]):
        install_base(final)
        shipped = True
    if shipped:
        record = read_config(final)["shipped"]
        return final, (f"shipped with compclip (pretrained by this curriculum on this world at commit {record['commit']}; "
                       "--rebuild-base pretrains it here)")
    base: str | Path = MODEL
    for (run, data, caption_key, lr, schedule, warmup, _), n in zip(CURRICULUM, steps, strict=True):
        train_data = "::".join(str(world_dir / split / "images.npy") for split in data.split("::"))
        base = _train(train / run, method="siglip", model=str(base), steps=n, warmup=min(n, warmup), schedule=schedule, lr=lr,
                      optimizer="adamw", weight_decay=0.1, caption_key=caption_key, **dict(common, train_data=train_data))
    return Path(base), f"pretrained from scratch, shapes first ({pretrain_steps} SigLIP steps over {len(CURRICULUM)} runs)"


def shipped_record() -> dict[str, Any] | None:
    """What `pack_base` recorded of the shipped base (None where this copy of compclip ships none)."""
    path = SHIPPED_BASE / "shipped.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def shipped_fits(cfg, pretrain_steps: int, batch_size: int = PRETRAIN_BATCH) -> bool:
    """Whether the shipped base is the one this demo would pretrain: the same model, world, curriculum and batch."""
    record = shipped_record()
    return (record is not None and record["model"] == MODEL and record["world"] == asdict(cfg) and pretrain_steps == PRETRAIN_STEPS
            and record["curriculum"] == [list(run) for run in CURRICULUM] and record["batch_size"] == batch_size)


def install_base(folder: Path) -> Path:
    """The shipped base as the checkpoint folder `folder`: its weights decompressed and checked against their SHA-256."""
    import hashlib
    import lzma
    import shutil

    from .io import atomic_dir
    from .models.checkpoint import CONFIG_NAME, OPEN_CLIP_CONFIG_NAME, WEIGHTS_NAME

    record = shipped_record()
    with atomic_dir(folder) as tmp:
        weights = lzma.decompress((SHIPPED_BASE / f"{WEIGHTS_NAME}.xz").read_bytes())
        if hashlib.sha256(weights).hexdigest() != record["sha256"]:
            raise DataError(f"{SHIPPED_BASE / (WEIGHTS_NAME + '.xz')}: damaged (its SHA-256 is not the one in shipped.json); "
                            "reinstall compclip, or pretrain the base with --rebuild-base")
        (tmp / WEIGHTS_NAME).write_bytes(weights)
        for name in (CONFIG_NAME, OPEN_CLIP_CONFIG_NAME):
            shutil.copyfile(SHIPPED_BASE / name, tmp / name)
    return folder


def pack_base(checkpoint: Path, world_dir: Path, commit: str, dest: Path = SHIPPED_BASE) -> dict[str, Any]:
    """Make the base at `checkpoint` (the last of `CURRICULUM`'s runs on the demo's world `world_dir`) the one compclip
    ships: its token-embedding rows that no text of the world reads set to zero (the world reads about 90 of CLIP's
    49,408 tokens; the others only ever had weight decay), which changes no feature the demo computes and lets the
    weights compress from 14 MB to about 1 MB (xz); `shipped.json` records the world, the curriculum, the commit and the
    weights' SHA-256."""
    import hashlib
    import lzma
    import shutil

    import torch

    from .io import atomic_dir
    from .models import load_model, save_checkpoint
    from .models.checkpoint import CONFIG_NAME, OPEN_CLIP_CONFIG_NAME, WEIGHTS_NAME, read_config

    model, _, tokenizer = load_model(str(checkpoint))
    read = sorted(world_token_ids(world_dir, tokenizer))
    embedding = model.text.token_embedding.weight if hasattr(model, "text") else model.token_embedding.weight
    keep = torch.zeros(embedding.shape[0], dtype=torch.bool)
    keep[read] = True
    with torch.no_grad():
        embedding[~keep] = 0
    source = read_config(checkpoint)
    record = {"model": MODEL, "world": json.loads((world_dir / "manifest.json").read_text())["config"],
              "curriculum": [list(run) for run in CURRICULUM], "batch_size": source["train_args"]["batch_size"], "commit": commit,
              "tokens_read": len(read)}
    with atomic_dir(dest) as tmp:
        packed = save_checkpoint(model, tmp / "checkpoint", method=source.get("method"), step=source.get("step"),
                                 train_args=source.get("train_args"))
        weights = (packed / WEIGHTS_NAME).read_bytes()
        record["sha256"] = hashlib.sha256(weights).hexdigest()
        (tmp / f"{WEIGHTS_NAME}.xz").write_bytes(lzma.compress(weights, preset=9 | lzma.PRESET_EXTREME))
        write_json(tmp / CONFIG_NAME, {**read_config(packed), "shipped": record})
        shutil.copyfile(packed / OPEN_CLIP_CONFIG_NAME, tmp / OPEN_CLIP_CONFIG_NAME)
        shutil.rmtree(packed)
        write_json(tmp / "shipped.json", record)
    return record


def world_token_ids(world_dir: Path, tokenizer) -> set[int]:
    """Every token id of every text in a world folder: captions, benchmark texts, zero-shot templates and class names
    (every string of its JSON and JSONL files, every line of its text and CSV files, every folder's name)."""
    texts: set[str] = set()

    def strings(value: Any) -> None:
        if isinstance(value, str):
            texts.add(value)
        elif isinstance(value, dict):
            for v in value.values():
                strings(v)
        elif isinstance(value, list):
            for v in value:
                strings(v)

    for path in world_dir.rglob("*"):
        if path.is_dir():
            texts.add(path.name)
        elif path.suffix == ".jsonl":
            for line in path.read_text(encoding="utf-8").splitlines():
                strings(json.loads(line))
        elif path.suffix == ".json":
            strings(json.loads(path.read_text(encoding="utf-8")))
        elif path.suffix in (".txt", ".csv"):
            texts.update(path.read_text(encoding="utf-8").splitlines())
    ids: set[int] = set()
    batch = sorted(texts)
    for start in range(0, len(batch), 4096):
        ids.update(tokenizer(batch[start:start + 4096]).unique().tolist())
    return ids


def run_device(device: str | None) -> str:
    """`--device` checked as `compclip train` checks it (before the world is made), or the default: cuda where a GPU
    is visible, else cpu (evaluation needs a name)."""
    import torch

    from .train.config import check_device

    check_device(device)
    return device or ("cuda" if torch.cuda.is_available() else "cpu")


def held_out_attention(world: Path, c2lip: Path, siglip: Path, out: Path) -> tuple[Path, str]:
    """`compclip attention --compare` on the first unseen test scene, for its held-out colour×shape pairing."""
    from .plots import attention_comparison

    held = {tuple(p) for p in json.loads((world / "manifest.json").read_text())["heldout"]}
    with open(world / "test_unseen" / "scenes.jsonl", encoding="utf-8") as f:
        record = json.loads(f.readline())
    obj = next(o for o in record["scene"]["objects"] if (o["color"], o["shape"]) in held)
    concept = f"{obj['color']} {obj['shape']}"
    image = world / "test_unseen" / "coco" / "val2017" / f"test_unseen_{record['index']:06d}.png"
    return attention_comparison(image, concept, [(str(c2lip), None), (str(siglip), None)], out), concept


CONTROL_BINDS = 80.0  # the positive control's seen swap-attribute (%) from which the world is taken to show binding
CONTROL = "attswap-ft"


def reading(numbers: dict[str, dict[str, dict[str, list]]]) -> str:
    """The table in one line: whether the positive control binds the pairings it saw (can this world show binding at
    all?), where every other model stands on the same question, and what each fine-tune costs in zero-shot shape."""
    mean = lambda model, split, column: interval(numbers[model][split][column])[0]  # noqa: E731
    others = ", ".join(f"{m} {mean(m, 'seen', 'SC swap-att'):.1f}" for m in numbers if m != CONTROL)
    cost = ", ".join(f"{m} {mean(m, 'seen', 'ZS shape'):.1f}" for m in numbers)
    control = mean(CONTROL, "seen", "SC swap-att")
    if control >= CONTROL_BINDS:
        said = (f"The positive control (attswap) binds the pairings it saw: {control:.1f} % seen swap-attribute (chance 50; unseen "
                f"{mean(CONTROL, 'unseen', 'SC swap-att'):.1f}), so a row's seen swap-attribute says whether that method binds: {others}.")
    else:
        said = (f"The positive control (attswap) does not bind: {control:.1f} % seen swap-attribute (chance 50, its target "
                f"{CONTROL_BINDS:.0f}), so this world cannot show binding and no row's swap-attribute says whether a method binds "
                f"({others}).")
    return f"{said} What it costs, zero-shot shape (seen): {cost}."


def _cell(values: list) -> str:
    if any(isinstance(v, str) for v in values):  # "n/a": a score the model lacks
        return str(values[0])
    return fmt(*interval(values))


def seed_table(numbers: dict[str, dict[str, dict[str, list]]], title: str) -> tuple[Table, str]:
    """Mean ± 95 % interval per model and split, then each fine-tuned method minus the first one, seed by
    seed, with `*` where the paired interval excludes zero. Returned as a rich table and as Markdown."""
    rows = [(name, split, [_cell(numbers[name][split][h]) for h in COLUMNS]) for name in numbers for split in SPLITS]
    tuned = [n for n in numbers if n != "base"]
    for other in tuned[1:]:
        for split in SPLITS:
            cells = []
            for h in COLUMNS:
                a, b = numbers[other][split][h], numbers[tuned[0]][split][h]
                if any(isinstance(v, str) for v in a + b) or len(a) != len(b):
                    cells.append("n/a")
                    continue
                cells.append(fmt_difference(*paired(a, b)))
            rows.append((f"{other} − {tuned[0]}", split, cells))
    table = Table(title=title)
    table.add_column("model")
    table.add_column("split")
    for header in COLUMNS:
        table.add_column(header, justify="right")
    for name, split, cells in rows:
        table.add_row(name, split, *cells)
    lines = [f"# {title}", "", "`*`: the paired 95 % interval of the difference excludes zero.", "",
             "| model | split | " + " | ".join(COLUMNS) + " |", "|" + " --- |" * (len(COLUMNS) + 2)]
    lines += [f"| {name} | {split} | " + " | ".join(cells) + " |" for name, split, cells in rows]
    return table, "\n".join(lines) + "\n"
