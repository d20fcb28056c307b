"""The `compclip` command line (typer). Subcommands import their heavy modules lazily, so help is instant.

Every option is checked before anything is built or written; a problem the user can fix
(`CompclipError`, or a malformed command line) prints one `error:` line and exits 2.
"""
from __future__ import annotations

import sys
from pathlib import Path

import typer

from . import __version__, progress
from .options import key_values

# Names listed in the help; tests/test_cli.py checks them against the method and benchmark registries.
METHODS = "siglip, clip, c2lip, hardneg, negclip, clic, occlip, attswap (the binding world's positive control)"
BENCHMARKS = ("sugarcrepe, sugarcrepe_pp, winoground, aro_vg_relation, aro_vg_attribution, aro_order, whatsup, vl_checklist, "
              "inpaint_coco, concept_ranking, zeroshot, retrieval")
MODEL_HELP = "open_clip name (e.g. ViT-B-16-SigLIP, compclip-tiny-siglip), hf-hub: id, or compclip checkpoint folder."
GLOBAL_FLAGS = ("--quiet", "-q", "--verbose", "-v")

app = typer.Typer(
    name="compclip",
    help="Make contrastive vision-language models compositional: concepts, fine-tuning, evaluation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: flags without a type, nothing heavy imported
    context_settings={"max_content_width": 120},
)


@app.callback()
def _options(
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Hide progress bars and informational logs (also after the command)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logs, open_clip's included (also after the command)."),
) -> None:
    progress.configure(quiet=quiet, verbose=verbose)


@app.command()
def version() -> None:
    """Print the versions of compclip and the libraries it drives."""
    import importlib.metadata as md

    typer.echo(f"compclip {__version__}")
    for dist in ("torch", "open-clip-torch", "timm", "spacy", "webdataset", "transformers"):
        try:
            typer.echo(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            typer.echo(f"{dist} (not installed)")


@app.command()
def export(
    checkpoint: Path = typer.Argument(..., help="A compclip checkpoint folder."),
    out: str = typer.Argument(..., help="A folder to write (model, config, tokenizer, README.md model card), or for "
                                        "--format open_clip a .safetensors file: the state dict alone."),
    fmt: str = typer.Option("open_clip", "--format", help="open_clip (a local-dir: folder or a state dict file) or hf "
                                                              "(transformers CLIPModel / SiglipModel, what LLaVA-style code loads)."),
    results: list[Path] = typer.Option([], "--results", help="Folders searched for `compclip eval` results of these weights, for the "
                                                              "model card (repeatable).  [default: the checkpoint's run folder]"),
    license: str = typer.Option("other", help="The license the model card declares: your base model's (e.g. mit, apache-2.0)."),
    force: bool = typer.Option(False, "--force", help="Replace an earlier export at OUT."),
) -> None:
    """Write a checkpoint where users take it: open_clip and CLIP_benchmark, or Hugging Face transformers."""
    from .export import export as write

    target, usage, notes = write(checkpoint, out, fmt, force=force, results=results, license=license)
    typer.echo(f"wrote {target}; load it with:\n{usage}")
    for note in notes:
        typer.echo(f"note: {note}")


@app.command()
def concepts(
    input: Path = typer.Argument(..., help="Captions: .csv/.tsv, .jsonl, webdataset .tar shards, or a COCO captions .json."),
    out: Path = typer.Option(None, "--out", help="The concept store folder; re-runs reuse it."),
    what: str = typer.Option("noun-phrases,pos,graph,keywords", help="Comma-separated fields: noun-phrases, pos, graph, keywords."),
    workers: int = typer.Option(2, help="Parser processes (at least 1)."),
    caption_key: str = typer.Option("caption", help="Caption column (CSV/TSV), key (JSONL) or json field (shards)."),
    with_prep: bool = typer.Option(False, "--with-prep", help="Keep a prepositional modifier: 'a man in a red shirt'."),
    shard_size: int = typer.Option(20_000, help="Records per store shard: the unit a killed run resumes from."),
    part: str = typer.Option(
        None, help="Run part i/n of the captions (0-based, split by caption hash); default: a SLURM array task's place, else all."
    ),
    into_shards: Path = typer.Option(
        None, "--into-shards", help="Instead of a store: copy the webdataset shards of INPUT here with a concepts.json per sample."
    ),
) -> None:
    """Extract concepts for every caption of INPUT into a cached, resumable store (or into copies of its shards)."""
    from .concepts import build_store, iter_captions, parse_part
    from .errors import UsageError

    if (out is None) == (into_shards is None):
        raise UsageError("give --out (a concept store) or --into-shards (webdataset copies), one of them")
    if into_shards is not None:
        from .concepts import shards_with_concepts

        stats = shards_with_concepts(str(input), into_shards, what, with_prep=with_prep, workers=workers, caption_key=caption_key)
        typer.echo(f"{stats['shards_written']} shards written to {into_shards} ({stats['samples']} samples, "
                   f"{stats['skipped_shards']} already there)")
        return
    i, n = parse_part(part)
    store, stats = build_store(
        iter_captions(input, caption_key), out, what, with_prep=with_prep, workers=workers, shard_size=shard_size, part=(i, n)
    )
    of_part = f"part {i}/{n}: " if n > 1 else ""
    typer.echo(
        f"{of_part}{stats['captions']} captions: {stats['parsed']} parsed, the rest cached, repeated or in other parts; "
        f"{stats['shards_written']} shards written to {out} ({stats['captions_per_s']:.0f} captions/s)"
    )
    if store is None:
        typer.echo(f"waiting for parts {', '.join(f'{m}/{n}' for m in stats['missing_parts'])}: the last part to finish indexes the store")
    else:
        typer.echo(f"indexed {len(store)} records")


@app.command()
def train(
    method: str = typer.Option(..., help=f"Method, or a '+'-joined combination (c2lip+hardneg): {METHODS}; options: `compclip methods`."),
    model: str = typer.Option(..., help=MODEL_HELP),
    train_data: str = typer.Option(
        ..., help="CSV/TSV, webdataset .tar shards (brace patterns), a captions .json, or an image .npy (JSONL beside it; "
                  "several joined by :: are interleaved)."
    ),
    out: Path = typer.Option(..., help="Run folder: checkpoints, log.jsonl, tensorboard; re-running resumes."),
    pretrained: str = typer.Option(None, help="open_clip pretrained tag or weights file for --model."),
    image_root: Path = typer.Option(
        None, help="Folder the CSV/JSON image paths are relative to. Default: the data file's folder, or its images/."
    ),
    concepts: Path = typer.Option(
        None, help="Concept store from `compclip concepts`, for a method that reads concepts (`compclip methods` lists the "
                   "fields each one reads)."
    ),
    method_opt: list[str] = typer.Option(
        [], "--method-opt", help="KEY=VALUE, repeatable: an option of the method, e.g. lambda_npc=2 (`compclip methods` lists them)."
    ),
    image_key: str = typer.Option("image", help="CSV/TSV image column."),
    caption_key: str = typer.Option("caption", help="CSV/TSV caption column, webdataset json field, or JSONL field (.npy)."),
    batch_size: int = typer.Option(32, help="Images per process and micro-batch."),
    accum_freq: int = typer.Option(1, help="Micro-batches per optimizer step (features cached, open_clip style)."),
    steps: int = typer.Option(1000, help="Optimizer steps."),
    lr: float = typer.Option(1e-5, help="Peak learning rate."),
    wd: float = typer.Option(0.0, help="Weight decay (not on gains, biases and logit scale/bias)."),
    optimizer: str = typer.Option("adam", help="adam, adamw or sgd."),
    beta1: float = typer.Option(0.9, help="Adam β1."),
    beta2: float = typer.Option(0.999, help="Adam β2."),
    eps: float = typer.Option(1e-8, help="Adam ε."),
    warmup: int = typer.Option(0, help="Linear warm-up steps."),
    schedule: str = typer.Option("cosine", help="cosine or const after warm-up."),
    precision: str = typer.Option("fp32", help="fp32, amp_bf16 or amp (fp16 with loss scaling)."),
    grad_checkpointing: bool = typer.Option(False, "--grad-checkpointing", help="Recompute activations in backward to save memory."),
    lock_image: bool = typer.Option(False, "--lock-image", help="Freeze the image tower."),
    lock_text: bool = typer.Option(False, "--lock-text", help="Freeze the text tower."),
    workers: int = typer.Option(2, help="DataLoader workers per process."),
    shuffle: int = typer.Option(1000, help="Records in each worker's seeded shuffle buffer (new order each epoch); 0 reads in file order."),
    seed: int = typer.Option(0, help="Seed of the model's initialisation, data order, augmentation and negatives."),
    save_every: int = typer.Option(500, help="Checkpoint every N steps (and at the end)."),
    keep: int = typer.Option(2, help="Checkpoints to keep."),
    log_every: int = typer.Option(1, help="Write log.jsonl and tensorboard every N steps."),
    device: str = typer.Option(None, help="cpu to stay off the GPU.  [default: each process takes the GPU of its local rank, if any]"),
    min_concept_coverage: float = typer.Option(
        0.5, help="A concept method stops when fewer of the first step's captions have concepts it can use (0 never stops)."
    ),
    skip_nonfinite: int = typer.Option(0, help="Steps with a NaN or inf loss or gradient skipped (no update) before training stops."),
) -> None:
    """Fine-tune a model (single process, or under torchrun / SLURM srun with one process per GPU)."""
    from .train import TrainConfig
    from .train import train as run

    cfg = TrainConfig(
        method=method, model=model, train_data=train_data, out=str(out), pretrained=pretrained,
        image_root=str(image_root) if image_root else None, concepts=str(concepts) if concepts else None,
        method_options=key_values(method_opt, "--method-opt", "lambda_npc=2"), image_key=image_key, caption_key=caption_key,
        batch_size=batch_size,
        accum_freq=accum_freq, steps=steps, lr=lr, weight_decay=wd, optimizer=optimizer, betas=(beta1, beta2), eps=eps,
        warmup=warmup, schedule=schedule, precision=precision, grad_checkpointing=grad_checkpointing, lock_image=lock_image,
        lock_text=lock_text, workers=workers, shuffle=shuffle, seed=seed, save_every=save_every, keep=keep, log_every=log_every,
        device=device, min_concept_coverage=min_concept_coverage, skip_nonfinite=skip_nonfinite,
    )
    terms = run(cfg)
    typer.echo(f"finished {steps} steps: " + ", ".join(f"{k} {v:.4f}" for k, v in terms.items()))


@app.command()
def methods() -> None:
    """List the fine-tuning methods and each one's options (set them with `train --method-opt KEY=VALUE`)."""
    import dataclasses

    from .methods import list_methods, method_concept_fields, method_options

    for name in list_methods():
        fields = dataclasses.fields(method_options(name))
        needs = method_concept_fields(name)
        reads = f" (reads concepts: --what {','.join(f.replace('_', '-') for f in needs)})" if needs else ""
        typer.echo(f"{name}{reads}" if fields else f"{name}{reads}: no options")
        for f in fields:
            typer.echo(f"  {f.name}={f.default}: {f.metadata['help']}")


@app.command()
def attention(
    model: str = typer.Option(..., help=MODEL_HELP),
    image: Path = typer.Option(..., help="The image."),
    concept: str = typer.Option(..., help='The concept, e.g. "black sweater".'),
    out: Path = typer.Option(..., help="PNG to write."),
    compare: str = typer.Option(None, help="A second model: also draw its map and the difference."),
    pretrained: str = typer.Option(None, help="Pretrained tag or weights file for --model."),
    temperature: float = typer.Option(None, help="Attention temperature.  [default: √D, as in training]"),
) -> None:
    """Draw a concept's cross-attention over an image, and the difference between two models."""
    from .plots import attention_comparison

    if not image.is_file():
        from .errors import MissingFileError

        raise MissingFileError(f"--image {image}: no such file")
    models = [(model, pretrained)] + ([(compare, None)] if compare is not None else [])
    typer.echo(f"wrote {attention_comparison(image, concept, models, out, temperature)}")


@app.command("eval")
def eval_(
    model: str = typer.Option(..., help=MODEL_HELP),
    benchmark: str = typer.Option(..., help=f"Comma-separated benchmarks: {BENCHMARKS}."),
    out: Path = typer.Option(..., help="Folder for the <benchmark>.json results."),
    pretrained: str = typer.Option(None, help="open_clip pretrained tag or weights file for --model."),
    data_root: Path = typer.Option(None, envvar="COMPCLIP_DATA", help="Benchmark data root (docs/data.md), or COMPCLIP_DATA."),
    ties: str = typer.Option(
        "official", help="official (each benchmark's own rule: `compclip benchmarks`), strict (a tie is wrong, as sugar-crepe) "
                         "or clip_benchmark (argmax: a tie goes to the option listed first), for every benchmark."
    ),
    bench_opt: list[str] = typer.Option(
        [], "--bench-opt", help="NAME.KEY=VALUE, repeatable: a benchmark's option, e.g. vl_checklist.pairs=zip (`compclip benchmarks`)."
    ),
    batch_size: int = typer.Option(64, help="Images or captions per forward pass."),
    workers: int = typer.Option(2, help="DataLoader workers decoding images."),
    cache: Path = typer.Option(None, help="Embedding cache folder, keyed by checkpoint hash and file."),
    device: str = typer.Option(None, help="cpu, cuda or cuda:N.  [default: cuda where torch sees a GPU, else cpu]"),
    precision: str = typer.Option(
        None, help="fp32, amp_bf16 or amp (fp16 autocast).  [default: amp on a GPU, as CLIP_benchmark; fp32 on the CPU]"
    ),
) -> None:
    """Evaluate a model on benchmarks (NAME, or NAME/SPLIT for one split); each unique image and caption is encoded
    once for all of them.

    Exits 1 when a benchmark could score no example (its result is still written, marked incomplete).
    """
    from .eval import evaluate
    from .eval.run import Job, evaluated_nothing, split_options

    records = evaluate(model, benchmark, out, pretrained, data_root, ties, batch_size, workers, cache, device, precision,
                       split_options(bench_opt))
    empty = []
    for name, record in records.items():
        if evaluated_nothing(record):
            empty.append(name)
            file = out / Job(name, name, ()).file
            typer.echo(f"{name}: nothing evaluated ({_why_nothing(record)}); {file} is marked incomplete")
            continue
        headline = {k: v for k, v in record["metrics"].items() if not isinstance(v, dict)}
        flag = "" if record["complete"] else "  (incomplete)"
        shown = {k: "n/a" if v is None else v if isinstance(v, str) else f"{v:.4f}" for k, v in headline.items()}
        typer.echo(f"{name}: " + ", ".join(f"{k} {v}" for k, v in shown.items()) + flag)
    if empty:
        raise typer.Exit(1)


def _why_nothing(record: dict) -> str:
    if record.get("lacks"):
        return record["lacks"]
    missing = record.get("missing_images", {})
    if missing.get("count"):
        return f"all {missing['count']} images missing, e.g. {missing['examples'][0]}"
    return "no examples"


@app.command()
def benchmarks() -> None:
    """List the benchmarks: their splits (--benchmark NAME/SPLIT), official tie rule, options (--bench-opt NAME.KEY=VALUE)
    and where their data goes."""
    import dataclasses

    from .eval import REGISTRY

    for name, bench in sorted(REGISTRY.items()):
        splits = f"; splits: {', '.join(bench.splits)}" if bench.splits else ""
        typer.echo(f"{name} (ties: {bench.ties}{splits})")
        typer.echo(f"  data: {bench.layout}")
        for f in dataclasses.fields(bench.Options):
            typer.echo(f"  {name}.{f.name}={f.default}: {f.metadata['help']}")


@app.command()
def report(
    results: list[Path] = typer.Argument(..., help="Result folders from `compclip eval`, one per model."),
    out: Path = typer.Option(..., help="Folder for report.md, CSV tables and PNG plots."),
) -> None:
    """Tables (Markdown, CSV) in the layout of the C2LIP paper's Table 2, per-split tables and plots."""
    from .eval import build_report

    typer.echo(f"wrote {build_report(results, out)}")


data_app = typer.Typer(help="Benchmark data: download it, and list what each benchmark still lacks.", no_args_is_help=True)
app.add_typer(data_app, name="data")


@data_app.command("download")
def data_download(
    name: str = typer.Argument(..., help="sugarcrepe, sugarcrepe_pp, coco_val2017 or coco_captions."),
    data_root: Path = typer.Option(None, envvar="COMPCLIP_DATA", help="Benchmark data root (or COMPCLIP_DATA)."),
) -> None:
    """Fetch a dataset's official public files: resumable, verified by SHA-256."""
    from .eval.base import data_root as resolve_root
    from .eval.download import download

    for path in download(name, resolve_root(data_root)):
        typer.echo(f"ok {path}")


@data_app.command("check")
def data_check(data_root: Path = typer.Option(None, envvar="COMPCLIP_DATA", help="Benchmark data root (or COMPCLIP_DATA).")) -> None:
    """List, per benchmark, the annotation files and images it still lacks."""
    from .data.images import image_ref
    from .eval import REGISTRY
    from .eval.base import data_root as resolve_root

    root = resolve_root(data_root)
    for name, bench in sorted(REGISTRY.items()):
        lacks = bench.lacks(root, ())
        if lacks:
            typer.echo(f"{name}: {lacks}")
            continue
        gone = [image_ref(p) for p in bench.images(root) if not image_ref(p).present()]
        shown = ", ".join(str(p.file.relative_to(root)) for p in gone[:3])
        typer.echo(f"{name}: ready" if not gone else f"{name}: {len(gone)} images missing, e.g. {shown}")


world_app = typer.Typer(help="The synthetic binding world: scenes, captions, held-out pairings, benchmarks.", no_args_is_help=True)
app.add_typer(world_app, name="world")


@world_app.command("generate")
def world_generate(
    out: Path = typer.Option(..., help="Folder for train/, val/, test_seen/ and test_unseen/."),
    n_train: int = typer.Option(20_000, help="Training scenes."),
    n_val: int = typer.Option(500, help="Validation scenes."),
    n_test: int = typer.Option(500, help="Scenes per test split (and as many single objects for zero-shot)."),
    n_singles: int = typer.Option(0, help="Single objects of seen pairings with short captions (singles/), for a base's curriculum."),
    size: int = typer.Option(224, help="Image side in pixels (the demo uses 64)."),
    heldout: float = typer.Option(0.25, help="Fraction of colour×shape pairings never seen in training."),
    min_objects: int = typer.Option(1, help="Fewest objects in a training scene (test scenes have at least 2)."),
    max_objects: int = typer.Option(4, help="Most objects in a scene (2 to 4)."),
    colors: int = typer.Option(10, help="Colours used (the first N of the palette)."),
    shapes: int = typer.Option(7, help="Shapes used (the first N)."),
    density: float = typer.Option(1.0, help="Attribute density: chance that a mention names each attribute (size, colour)."),
    completeness: float = typer.Option(1.0, help="Caption completeness: fraction of a scene's objects its caption mentions."),
    saliency: bool = typer.Option(False, "--saliency", help="Saliency bias: captions mention only the largest object."),
    seed: int = typer.Option(0, help="Seed of the held-out pairings and every scene."),
    workers: int = typer.Option(2, help="Rendering processes."),
) -> None:
    """Generate the binding world (re-running with the same settings reuses it)."""
    from .world import WorldConfig, generate

    cfg = WorldConfig(seed=seed, n_train=n_train, n_val=n_val, n_test=n_test, n_singles=n_singles, size=size, heldout=heldout,
                      min_objects=min_objects, max_objects=max_objects, colors=colors, shapes=shapes, density=density,
                      completeness=completeness, saliency=saliency)
    typer.echo(f"world ready in {generate(out, cfg, workers)}")


@app.command()
def demo(
    out: Path = typer.Option(Path("runs/demo"), help="Where the world, runs, results and report go (re-runs reuse them)."),
    methods: str = typer.Option("siglip,c2lip", help=f"Comma-separated fine-tuning methods compared from the same base: {METHODS}."),
    n_train: int = typer.Option(20_000, help="Training scenes."),
    n_test: int = typer.Option(1250, help="Scenes per test split (1,250: one seed's standard error on swap-attribute <= 1.5 points)."),
    pretrain_steps: int = typer.Option(3400, help="SigLIP steps of the base from scratch, over its curriculum (shapes first)."),
    steps: int = typer.Option(300, help="Fine-tuning steps per method."),
    batch_size: int = typer.Option(128, help="Images per step."),
    seeds: str = typer.Option("0,1,2", help="Comma-separated fine-tuning seeds; the first also seeds the base and, without "
                              "--world-seeds, the world."),
    workers: int = typer.Option(2, help="DataLoader workers and rendering processes."),
    world: list[str] = typer.Option([], help="A world setting KEY=VALUE other than its default, e.g. heldout=0.5, density=0.5, "
                                    "completeness=0.5, saliency=true, colors=4 (repeatable; see `compclip world generate --help`)."),
    device: str = typer.Option(None, help="cpu or cuda: where every model trains and is scored, in fp32.  "
                                          "[default: cuda if a GPU is visible]"),
    world_seeds: str = typer.Option(None, help="Comma-separated world draws, each with its own base (the first in --out, the others "
                                    "in OUT/worlds/seed-W): the table is then over worlds, each world's mean over --seeds.  "
                                    "[default: one world, drawn with the first of --seeds]"),
    study: bool = typer.Option(False, help="The study's protocol in one flag: every method with the positive control, seeds "
                                           "0,1,2 in each of worlds 0,1,2 (about 3 hours on 2 cores; docs/results.md)."),
) -> None:
    """The whole method on the binding world: pretrain, fine-tune per method, evaluate seen and unseen, report."""
    from .demo import run_demo, study_protocol, world_options

    if study:
        methods, seeds, world_seeds = study_protocol(methods, seeds, world_seeds)
    run_demo(out, methods, n_train, n_test, pretrain_steps, steps, batch_size, seeds, workers, world_options(world), device, world_seeds)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: a problem the user can fix prints one `error:` line and exits 2, not a traceback."""
    from .errors import CompclipError

    args = list(sys.argv[1:] if argv is None else argv)
    # --quiet / --verbose belong to the app's callback; accept them after the command too
    args = [a for a in args if a in GLOBAL_FLAGS] + [a for a in args if a not in GLOBAL_FLAGS]
    try:
        code = app(args, prog_name="compclip", standalone_mode=False)
    except typer.TyperException as e:  # the command line itself: an unknown option, a missing or malformed value
        ctx = getattr(e, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        typer.echo(f"error: {e.format_message()}{hint}", err=True)
        raise SystemExit(e.exit_code) from None
    except CompclipError as e:
        typer.echo(f"error: {e}", err=True)
        raise SystemExit(2) from None
    raise SystemExit(code if isinstance(code, int) else 0)
