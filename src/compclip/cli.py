"""The `compclip` command line (typer). Subcommands import their heavy modules lazily, so help is instant.

Every option is checked before anything is built or written; a problem the user can fix
(`CompclipError`, or a malformed command line) prints one `error:` line and exits 2; a cluster's stop signal, one
`stopped:` line.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import re
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import typer

from . import __version__, progress
from .concepts.config import ConceptConfig, NegativesConfig
from .demo import DemoConfig
from .eval.config import EvalConfig
from .options import MODEL_HELP, field_flag, key_values
from .train.config import HELP_GROUPS, TrainConfig
from .world import WorldConfig

GLOBAL_FLAGS = ("--quiet", "-q", "--verbose", "-v")

app = typer.Typer(
    name="compclip",
    help="Make contrastive vision-language models compositional: concepts, fine-tuning, evaluation.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: flags without a type, nothing heavy imported
    context_settings={"max_content_width": 120},
)


def _parameter(flag: str) -> str:
    """The Python name typer gives a flag's value: `--beta1` -> `beta1`."""
    return flag.lstrip("-").replace("-", "_")


def _flags(cls: type) -> list[inspect.Parameter]:
    """typer's parameters for the fields of the declaration `cls`: its flag, type, default and help, as declared."""
    hints, params = typing.get_type_hints(cls), []
    for f in dataclasses.fields(cls):
        kind, help, flag = hints[f.name], f.metadata["help"], field_flag(f)
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        default = ... if required else f.default
        if typing.get_origin(kind) is tuple:  # one flag per element: --beta1, --beta2
            params += [inspect.Parameter(_parameter(name), inspect.Parameter.KEYWORD_ONLY, annotation=sub,
                                         default=typer.Option(f.default[i], name, help=f"{help} (element {i + 1} of {len(flag)})"))
                       for i, (name, sub) in enumerate(zip(flag, typing.get_args(kind), strict=True))]
            continue
        metavar = f.metadata.get("metavar")
        if typing.get_origin(kind) is dict:  # KEY=VALUE, repeatable
            kind, default, metavar = list[str], [], metavar or "KEY=VALUE"
        elif type(None) in typing.get_args(kind):
            kind = Optional[next(a for a in typing.get_args(kind) if a is not type(None))]  # noqa: UP045 (typer reads Optional)
        if kind is bool:  # --no-FLAG turns off what a recipe turns on (--no-dataset-resampled for a CSV)
            flag = f"{flag}/--no-{flag.removeprefix('--')}"
        completes = f.metadata.get("names")
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=kind,
                                        default=typer.Option(default, flag, *f.metadata.get("aliases", ()), help=help,
                                                             metavar=metavar,
                                                             autocompletion=completes and _completion(completes))))
    return params


def _completion(kind: str) -> Callable[[str], list[str]]:
    """Shell completion of a method or benchmark name (`compclip.names`, nothing imported), the last of a `+`- or
    `,`-joined list completed after the ones typed."""

    def complete(incomplete: str) -> list[str]:
        from .names import known_names

        cut = max(incomplete.rfind("+"), incomplete.rfind(","))
        typed, last = incomplete[:cut + 1], incomplete[cut + 1:]
        return [typed + name for name in known_names(kind) if name.startswith(last)]

    return complete


def declared(cls: type) -> Callable[[Callable], Callable]:
    """A command whose flags include every field of the declaration `cls`: the command is called with its own
    parameters and `options`, the declaration's values as `declared_values` reads them."""

    def wrap(command: Callable) -> Callable:
        own = [p for p in inspect.signature(command).parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        params = own + _flags(cls)

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            return command(**values)

        run.__signature__ = inspect.Signature(params)
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return wrap


def grouped_help(cls: type, groups: dict[str, tuple[str, ...]]) -> type:
    """A command class whose --help lists the options of the declaration `cls` in `groups`' sections (heading: field
    names), in their order, then the command's own options."""
    from typer.core import TyperCommand

    sections = {heading: [n for f in fields for n in _parameter_names(cls, f)] for heading, fields in groups.items()}

    class Grouped(TyperCommand):
        def format_options(self, ctx, formatter) -> None:
            records = {p.name: p.get_help_record(ctx) for p in self.get_params(ctx)}
            placed = {n for names in sections.values() for n in names}
            for heading, names in [*sections.items(), ("Other options", [n for n in records if n not in placed])]:
                rows = [records[n] for n in names if records.get(n)]
                if rows:
                    with formatter.section(heading):
                        formatter.write_dl(rows)

    return Grouped


def _parameter_names(cls: type, name: str) -> list[str]:
    """The typer parameter names of the field `name` of `cls`: its own, or one per element of a tuple field."""
    flag = field_flag(next(f for f in dataclasses.fields(cls) if f.name == name))
    return [_parameter(n) for n in flag] if isinstance(flag, tuple) else [name]


def declared_values(cls: type, options: dict[str, Any]) -> dict[str, Any]:
    """The fields of `cls` from a command's `options`: tuple elements joined, KEY=VALUE items parsed."""
    hints, values = typing.get_type_hints(cls), {}
    for f in dataclasses.fields(cls):
        flag = field_flag(f)
        if typing.get_origin(hints[f.name]) is tuple:
            values[f.name] = tuple(options[_parameter(name)] for name in flag)
        elif typing.get_origin(hints[f.name]) is dict and f.name in options:
            example = re.search(r"e\.g\. ([\w.]+=[\w.]*\w)", f.metadata["help"])  # the help's own example, named once
            parse = f.metadata.get("parse") or (lambda items, flag=flag, e=example: key_values(items, flag, e[1] if e else "KEY=1"))
            values[f.name] = parse(options[f.name])
        elif f.name in options:
            values[f.name] = options[f.name]
    return values


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"compclip {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Hide progress bars and informational logs (also after the command)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logs, open_clip's included (also after the command)."),
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print compclip's version and exit (`compclip version` adds its libraries')."),
) -> None:
    progress.configure(quiet=quiet, verbose=verbose)
    _warn_of_a_narrow_locale()


def _warn_of_a_narrow_locale() -> None:
    """Under a locale whose file-name encoding is not UTF-8 (LANG=C on an old system, Python's UTF-8 mode off), Python
    cannot open a file whose name is not ASCII: every such image would be skipped as unreadable. Say why, once."""
    encoding = sys.getfilesystemencoding()
    if encoding.replace("-", "").lower() != "utf8":
        import logging

        logging.getLogger("compclip").warning(
            "this locale's file-name encoding is %s: files whose names it cannot spell (not ASCII) cannot be opened; run "
            "with a UTF-8 locale (export LC_ALL=C.UTF-8) or Python's UTF-8 mode (export PYTHONUTF8=1)", encoding)


@app.command()
def version() -> None:
    """Print the versions of compclip and the libraries it drives.

    Example:

    \b
    compclip version
    """
    import importlib.metadata as md

    typer.echo(f"compclip {__version__}")
    for dist in ("torch", "open-clip-torch", "timm", "spacy", "webdataset", "transformers"):
        try:
            typer.echo(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            typer.echo(f"{dist} (not installed)")


@app.command()
def export(
    checkpoint: Path = typer.Argument(..., metavar="CHECKPOINT", help="A compclip checkpoint folder, or a run folder (its "
                                                                  "checkpoints/latest)."),
    out: str = typer.Argument(..., metavar="OUT", help="A folder to write (model, config, tokenizer, README.md model card), or for "
                                        "--format open_clip a .safetensors file: the state dict alone."),
    fmt: str = typer.Option("open_clip", "--format", help="open_clip (a local-dir: folder or a state dict file) or hf "
                                                              "(transformers CLIPModel / SiglipModel, what LLaVA-style code loads)."),
    results: list[Path] = typer.Option([], "--results", metavar="DIR", help="Folders searched for `compclip eval` results of these "
                                       "weights, for the model card (repeatable).  [default: the checkpoint's run folder and results/]"),
    license: str = typer.Option("other", help="The license the model card declares, a Hub identifier: your base model's (e.g. mit, "
                                               "apache-2.0), or other with --license-name."),
    license_name: str = typer.Option(None, help="With --license other: the license's name.  [default: same-as-base-model]"),
    license_link: str = typer.Option(None, help="With --license other: where the license's text is (a URL or a file of the repo)."),
    push_to_hub: str = typer.Option(None, "--push-to-hub", help="Upload the export folder to this Hub repository (made if needed; "
                                                                "the token is huggingface_hub's: HF_TOKEN or `hf auth login`)."),
    force: bool = typer.Option(False, "--force", help="Replace an earlier export at OUT."),
) -> None:
    """Write a checkpoint where users take it: open_clip and CLIP_benchmark, or Hugging Face transformers. CHECKPOINT may be
    a run folder or its checkpoints/latest: the newest checkpoint.

    Example:

    \b
    compclip export runs/c2lip exports/c2lip-b16-hf --format hf --license mit
    """
    from .export import export as write
    from .text import one_line

    target, usage, notes = write(checkpoint, out, fmt, force=force, results=results, license=license, license_name=license_name,
                                 license_link=license_link, push_to_hub=push_to_hub)
    typer.echo(f"wrote {one_line(target)}; load it with:\n{usage}")
    for note in notes:
        typer.echo(f"note: {note}")


@app.command()
@declared(ConceptConfig)
def concepts(
    input: Path = typer.Argument(..., metavar="INPUT", help="Captions: .csv/.tsv, .jsonl, webdataset .tar shards, or a COCO "
                                                            "captions .json."),
    out: Path = typer.Option(None, "--out", help="The concept store folder; re-runs reuse it."),
    into_shards: Path = typer.Option(
        None, "--into-shards", help="Instead of a store: copy the webdataset shards of INPUT here with a concepts.json per sample."
    ),
    **options: Any,
) -> None:
    """Extract concepts for every caption of INPUT into a cached, resumable store (or into copies of its shards).

    Example:

    \b
    compclip concepts data/captions.csv --out concepts --what noun-phrases,pos --workers 8
    """
    from .concepts import build_store, iter_captions, parse_part
    from .concepts.inputs import count_captions
    from .errors import UsageError

    cfg = ConceptConfig(**declared_values(ConceptConfig, options))
    if (out is None) == (into_shards is None):
        raise UsageError("give --out (a concept store) or --into-shards (webdataset copies), one of them")
    if into_shards is not None:
        from .concepts import shards_with_concepts

        stats = shards_with_concepts(str(input), into_shards, cfg.what, with_prep=cfg.with_prep, workers=cfg.workers,
                                     caption_key=cfg.caption_key)
        typer.echo(f"{stats['shards_written']} shards written to {into_shards} ({stats['samples']} samples, "
                   f"{stats['skipped_shards']} already there)")
        for url, where in stats["damaged"].items():
            typer.echo(f"warning: {url}: {'; '.join(where)}; its copy holds the samples read past it", err=True)
        if stats["failed"]:
            from .errors import DataError

            failed = "; ".join(f"{url}: {why}" for url, why in stats["failed"].items())
            raise DataError(f"{len(stats['failed'])} shard(s) not copied ({failed}); the others are written: run again after "
                            "repairing or removing them")
        return
    i, n = parse_part(cfg.part)
    captions = iter_captions(input, cfg.caption_key)  # checks the input before it is counted
    store, stats = build_store(captions, out, cfg.what, with_prep=cfg.with_prep, workers=cfg.workers, shard_size=cfg.shard_size,
                               part=(i, n), total=count_captions(input))
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
@declared(NegativesConfig)
def negatives(
    data: Path = typer.Argument(..., metavar="DATA", help="Training data as JSON lines (.jsonl), a record a line."),
    out: Path = typer.Option(..., "--out", help="The JSON lines file to write: DATA's records with the negative fields (image "
                                                "paths as in DATA: write it beside DATA, or train with --image-root)."),
    **options: Any,
) -> None:
    """Fill in the negatives the released CE-CLIP, SVLC-R+L and DAC made with a masked language model, as data fields of a
    copy of DATA (resumable, in parts).

    Example:

    \b
    compclip negatives data/coco.jsonl --out data/coco-negatives.jsonl --what ceclip,llm
    """
    from .concepts.negatives import build_negatives
    from .parts import parse_part

    cfg = NegativesConfig(**declared_values(NegativesConfig, options))
    i, n = parse_part(cfg.part, what="the records")
    stats = build_negatives(data, out, cfg, (i, n))
    of_part = f"part {i}/{n}: " if n > 1 else ""
    typer.echo(f"{of_part}{stats['chunks_written']} chunks written ({stats['records']} records), {stats['chunks_there']} "
               "already there")
    for reason, (count, where) in stats["skips"].items():
        typer.echo(f"warning: skipped {count} record(s): {reason} (first: {where})", err=True)
    if not stats["complete"]:
        missing = stats["missing"]
        typer.echo(f"waiting for {len(missing)} chunk(s) of other parts (first: chunk {missing[0]}): the last part to finish writes {out}")
        return
    left_out = sum(count for count, _ in stats["skips_in_all"].values())
    typer.echo(f"wrote {out}" + (f" ({left_out} record(s) of DATA left out: no negatives made)" if left_out else ""))


@app.command(cls=grouped_help(TrainConfig, HELP_GROUPS))
@declared(TrainConfig)
def train(ctx: typer.Context, **options: Any) -> None:
    """Fine-tune a model (single process, or under torchrun / SLURM srun with one process per GPU).

    Example:

    \b
    torchrun --nproc_per_node 8 -m compclip train --recipe c2lip-cc3m --train-data 'cc3m/{00000..01411}.tar' \\
        --concepts concepts --out runs/c2lip
    """
    typed = _typed(ctx, TrainConfig)
    cfg = TrainConfig.from_given({k: v for k, v in declared_values(TrainConfig, options).items() if k in typed})
    cfg.check_values()  # before torch is imported: a typo answered at once
    from .train import Trainer
    from .train.run_folder import latest_checkpoint

    seeds = cfg.seed_list()
    if seeds:  # one run a seed, each a folder of its own, resumable as any run
        for seed in seeds:
            trainer = Trainer(dataclasses.replace(cfg, seed=seed, seeds=None, out=str(Path(cfg.out) / f"seed-{seed}")))
            terms, run = trainer.run(), trainer.cfg  # the run's own options: --epochs counted as steps
            typer.echo(f"seed {seed}: " + (f"finished {run.steps} steps into {run.out}" if terms else f"{run.out} had finished"))
        typer.echo(f"{len(seeds)} runs under {cfg.out}: evaluate each, then `compclip compare` their result folders, "
                   "comma-joined as one model, for the mean over seeds and its interval")
        return
    trainer = Trainer(cfg)
    terms, run = trainer.run(), trainer.cfg
    if not terms:
        typer.echo(f"nothing to train: {run.out} has finished its {run.steps} steps; more --steps extend it, or a second stage "
                   f"starts from its weights: --model {latest_checkpoint(run.out)} --out ANOTHER_FOLDER")
        return
    typer.echo(f"finished {run.steps} steps; the last step's loss: " + ", ".join(f"{k} {v:.4f}" for k, v in terms.items()))


def _typed(ctx: typer.Context, cls: type) -> set[str]:
    """The fields of `cls` whose flags the command line gave (not left at their defaults). By the source's name: typer
    may bring a click of its own, whose enum is not `click.core.ParameterSource`."""
    sources = {name: ctx.get_parameter_source(name) for name in ctx.params}
    given = {name for name, source in sources.items() if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")}
    fields = set()
    for f in dataclasses.fields(cls):
        flag = field_flag(f)
        names = [_parameter(n) for n in flag] if isinstance(flag, tuple) else [f.name]
        if given & set(names):
            fields.add(f.name)
    return fields


@app.command()
def recipes(names: list[str] | None = typer.Argument(None, metavar="[NAME]...", help="Show only these recipes (all when none).",
                                                     show_default=False)) -> None:
    """List the papers' published training recipes (`train --recipe NAME`): each one's citation, data and settings,
    marking the settings the paper leaves open that compclip chose, and where a run of it departs from the paper.

    Example:

    \b
    compclip recipes
    compclip recipes c2lip-cc3m
    """
    import shlex

    from .recipes import get_recipe, list_recipes

    for name in names or list_recipes():
        recipe = get_recipe(name)
        typer.echo(f"{name}: {recipe.citation}")
        typer.echo(f"  data: {recipe.data}")
        typer.echo(f"  compare: compclip report RESULTS --out DIR --paper {recipe.numbers['paper']} --paper-model "
                   f"{shlex.quote(recipe.numbers['model'])}")
        for key in recipe.setting_keys():
            source = recipe.cited.get(key)
            note = source if source is not None else f"compclip's choice: {recipe.choices[key]}"
            typer.echo(f"  {key}={json_value(recipe.value(key))}  ({note})")
        for departure in recipe.departures:
            typer.echo(f"  departs: {departure}")


def json_value(value: Any) -> str:
    import json

    return json.dumps(value) if isinstance(value, (list, dict, bool)) or value is None else str(value)


@app.command()
def methods() -> None:
    """List the fine-tuning methods and each one's options (set them with `train --method-opt KEY=VALUE`).

    Example:

    \b
    compclip methods
    """
    import dataclasses

    from .methods import LossPart, build_method, list_methods, method_concept_fields, method_options

    for name in list_methods():
        fields = dataclasses.fields(method_options(name))
        needs = method_concept_fields(name)
        reads = f" (reads concepts: --what {','.join(f.replace('_', '-') for f in needs)})" if needs else ""
        method = build_method(name)
        data = method.sample_fields  # what its parts declare per record, by these names (`data.readers.field_kind`)
        reads += f" (reads data fields: {', '.join(data)}; --field-key NAME=KEY)" if data else ""
        reads += f" (trains on --image-view {method.image_view})" if method.image_view != LossPart.image_view else ""
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
    temperature: float = typer.Option(None, help="Attention temperature over the raw tokens.  [default: √D, as training's "
                                                 "xac_attention=scaled; the default cosine at 1 is near uniform to look at]"),
) -> None:
    """Draw a concept's cross-attention over an image, and the difference between two models.

    Example:

    \b
    compclip attention --model runs/c2lip/checkpoints/best --compare ViT-B-16-SigLIP --image dog.jpg --concept 'a black dog' --out dog.png
    """
    from .errors import MissingFileError, UsageError
    from .plots import attention_comparison

    if not image.is_file():
        raise MissingFileError(f"--image {image}: {'a folder, not an image file' if image.is_dir() else 'no such file'}")
    if not concept.strip():
        raise UsageError('--concept is empty: give the words to look for, e.g. "black sweater"')
    if temperature is not None and not temperature > 0:
        raise UsageError(f"--temperature {temperature}: must be above 0 (the similarities are divided by it)")
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder: give the PNG to write, e.g. --out {out / 'attention.png'}")
    models = [(model, pretrained)] + ([(compare, None)] if compare is not None else [])
    typer.echo(f"wrote {attention_comparison(image, concept, models, out, temperature)}")


@app.command()
def neighbours(
    data: Path = typer.Argument(..., metavar="DATA", help="JSON lines of image paths and captions (.jsonl)."),
    model: str = typer.Option(..., help=MODEL_HELP),
    out: Path = typer.Option(..., help="The JSON lines to write: DATA's records, each with its neighbours."),
    pretrained: str = typer.Option(None, help="Pretrained tag or weights file for --model."),
    k: int = typer.Option(3, "--k", help="Neighbours a record (NegCLIP's released file lists three)."),
    key: str = typer.Option("neighbours", help="The field that holds them (train with --field-key neighbours=KEY)."),
    image_key: str = typer.Option("image", help="The field of each record's image path."),
    caption_key: str = typer.Option("caption", help="The field of each record's caption."),
    image_root: Path = typer.Option(None, help="The folder image paths are relative to (default: DATA's own)."),
    device: str = typer.Option("cpu", help="cpu or cuda."),
) -> None:
    """Write each record's nearest neighbours by image embedding, NegCLIP's hard-negative images (`negclip --method-opt
    hard_images=neighbours`).

    Example:

    \b
    compclip neighbours coco_train.jsonl --model ViT-B-32-quickgelu --pretrained openai --out coco_train_nn.jsonl
    """
    from .neighbours import write_neighbours
    from .train.config import check_device

    check_device(device)
    counts = write_neighbours(data, out, model, pretrained, k=k, key=key, image_key=image_key, caption_key=caption_key,
                              image_root=image_root, device=device)
    without = f"; {counts['without_image']} without a readable image list none" if counts["without_image"] else ""
    typer.echo(f"wrote {out}: {counts['records']} records, {k} neighbours each{without}")


@app.command("eval")
@declared(EvalConfig)
def eval_(**options: Any) -> None:
    """Evaluate a model on benchmarks (NAME, or NAME/SPLIT for one split); each unique image and caption is encoded
    once for all of them.

    Example:

    \b
    compclip eval --model runs/c2lip/checkpoints/best --benchmark sugarcrepe,winoground,retrieval --out results/c2lip

    Exits 1 when a benchmark could score no example (its result is still written, marked incomplete), or a model of a
    --model list could not be scored (each one line; the others are scored, and a summary table ends the output).
    """
    cfg = EvalConfig(**declared_values(EvalConfig, options))
    cfg.check_values()  # before torch is imported: a typo answered at once
    from .eval import evaluate
    from .eval.run import Job, evaluated_nothing
    from .eval.sweep import folder_name, is_sweep, sweep

    several = is_sweep(cfg)
    outcome = sweep(cfg) if several else None
    scored = outcome.scored if outcome is not None else {cfg.model: evaluate(cfg)}
    empty = []
    for model, records in scored.items():
        out, said = (Path(cfg.out) / folder_name(model), f"{model}: ") if several else (Path(cfg.out), "")
        for name, record in records.items():
            if evaluated_nothing(record):
                empty.append(name)
                file = out / Job(name, name, ()).file
                typer.echo(f"{said}{name}: nothing evaluated ({_why_nothing(record)}); {file} is marked incomplete")
                continue
            headline = {k: v for k, v in record["metrics"].items() if not isinstance(v, dict)}
            flag = "" if record["complete"] else "  (incomplete)"
            shown = {k: "n/a" if v is None else v if isinstance(v, str) else f"{v:,}" if isinstance(v, int)  # a count
                     else f"{v:.4f}" for k, v in headline.items()}
            typer.echo(f"{said}{name}: " + ", ".join(f"{k} {v}" for k, v in shown.items()) + flag)
    if outcome is not None:
        _sweep_summary(outcome)
    if empty or (outcome is not None and outcome.failed):
        raise typer.Exit(1)


def _sweep_summary(outcome) -> None:
    """The sweep's table: each model of this part scored, skipped (its results kept) or failed, and why."""
    rows = outcome.rows()
    counts = {status: sum(row[1] == status for row in rows) for status in ("scored", "skipped", "failed")}
    i, n = outcome.part
    part = f" (part {i}/{n} of {outcome.listed})" if n > 1 else ""
    typer.echo(f"sweep of {len(rows)} models{part}: " + ", ".join(f"{count} {status}" for status, count in counts.items()))
    width = max((len(model) for model, _, _ in rows), default=0)
    for model, status, why in rows:
        typer.echo(f"  {model:<{width}}  {status:<7}  {why}")


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
    and where their data goes.

    Example:

    \b
    compclip benchmarks
    """
    import dataclasses

    from .eval import REGISTRY

    for name, bench in REGISTRY.items():
        splits = f"; splits: {', '.join(bench.splits)}" if bench.splits else ""
        typer.echo(f"{name} (ties: {bench.ties}{splits})")
        typer.echo(f"  data: {bench.layout}")
        for f in dataclasses.fields(bench.Options):
            typer.echo(f"  {name}.{f.name}={f.default}: {f.metadata['help']}")


@app.command()
def models(ids: bool = typer.Option(False, "--ids", help="Only the ids of the loadable ones, one a line (for a shell loop); an "
                                     "OpenAI fine-tune's `-gelu` id after its own."),
           fetch_list: bool = typer.Option(False, "--fetch-list", help="Only what is not on this machine: for each file an entry "
                                           "lacks, its id, where to download it and the path (folder and file name) compclip "
                                           "looks for it at, tab-separated, one a line.")) -> None:
    """List the papers' released checkpoints (`eval --model ID`): each one's name, the papers' rows it is, the architecture
    and route it loads by, its `-gelu` id where it takes one (the same file under plain GELU), its source, and whether its
    weights are cached, or why it cannot be loaded (docs/models.md).

    Example:

    \b
    compclip models
    for m in $(compclip models --ids); do compclip eval --model $m --benchmark sugarcrepe --out results/$m; done
    compclip models --fetch-list   # download each on a machine with internet, copy the Hugging Face cache here
    """
    from .errors import UsageError
    from .models.released import cached, gelu_variant, get_released, list_released
    from .models.released import fetch_list as lacking

    if ids and fetch_list:
        raise UsageError("--ids and --fetch-list each list one thing: give one of them")
    for entry in map(get_released, list_released()):
        if fetch_list:
            for url, path in lacking(entry):
                typer.echo(f"{entry.id}\t{url}\t{path}")
            continue
        gelu = gelu_variant(entry)
        if ids:
            for loadable in (entry.id, gelu) if entry.loads_as is not None else ():
                if loadable:
                    typer.echo(loadable)
            continue
        where = (entry.hub_repo and f"{entry.hub_repo}/{entry.hub_file}") or entry.url or entry.pretrained or entry.model
        state = f"unavailable: {entry.unavailable}" if entry.loads_as is None else "cached" if cached(entry) else "not cached"
        typer.echo(f"{entry.id}: {entry.name} ({state})")
        typer.echo(f"  rows: {'; '.join(f'{paper} {row!r}' for paper, row in entry.rows)}")
        if entry.loads_as is not None:
            typer.echo(f"  loads as: {entry.loads_as} {entry.model}" + (f" from {where}" if where != entry.model else ""))
        if gelu:
            typer.echo(f"  {gelu}: the same file as {get_released(gelu).architecture} (plain GELU, as the releases' own loaders "
                       "build it, for the papers' rows scored under it)")
        elif entry.model:
            typer.echo(f"  architecture: {entry.model}")
        typer.echo(f"  source: {entry.source}")


@app.command()
def report(
    results: list[Path] = typer.Argument(..., metavar="RESULTS", help="Result folders from `compclip eval`, one per model; a model's "
                                         "several runs (seeds) joined by commas: r/seed-0,r/seed-1,r/seed-2 (--paper sets their "
                                         "mean and 95 % interval beside the paper's)."),
    out: Path = typer.Option(..., help="Folder for report.md, CSV tables and PNG plots."),
    paper: str = typer.Option(None, "--paper", help="Set the results beside a paper's published numbers: c2lip, clic, hardneg or "
                                                    "occlip (the report's paper.md and paper.csv; printed too)."),
    paper_model: str = typer.Option(None, "--paper-model", help="The paper's row to compare every model with.  [default: a released "
                                                                "checkpoint's (`compclip models`) its own row; the rest the paper's own "
                                                                "method's]"),
    label: list[str] = typer.Option(None, "--label", metavar="NAME", help="A name for each model, in order (repeatable).  [default: the "
                                                                         "folder's name]"),
    html: bool = typer.Option(False, "--html", help="Also write report.html: every item a model got wrong, filterable by split, by "
                                                   "what was swapped and by model, and where two models disagree."),
    data_root: Path = typer.Option(None, "--data-root", help="Where the benchmarks' data lies now, for --html's images.  [default: "
                                                             "the data root each result records]"),
) -> None:
    """Tables (Markdown, CSV) in the layout of the C2LIP paper's Table 2, per-split tables and figures (PNG, PDF, SVG: 95 %
    intervals, n per split, chance), each model against the first item by item; with --paper, the results beside that
    paper's numbers and the difference, naming what was not run; with --html, an error gallery.

    Example:

    \b
    compclip report results/siglip results/c2lip --label SigLIP --label C2LIP --out report --html
    """
    from .errors import UsageError
    from .eval import build_report

    if label and len(label) != len(results):
        raise UsageError(f"--label names {len(label)} models, {len(results)} are given")
    written = build_report(results, out, paper, paper_model, label or None, html, data_root)
    typer.echo(f"wrote {written}" + (f" and {written.with_name('report.html')} (open it in a browser)" if html else ""))
    if paper:
        typer.echo((out / "paper.md").read_text(encoding="utf-8").rstrip())


@app.command()
def compare(
    models: list[str] = typer.Argument(..., metavar="MODELS", help="Result folders from `compclip eval`, one per model (the first is "
                                                                   "the baseline); a model's several runs (seeds) joined by commas: "
                                                                   "runs/s0,runs/s1,runs/s2."),
    label: list[str] = typer.Option(None, "--label", metavar="NAME", help="A name for each model, in order (repeatable).  [default: the "
                                                                         "folder's name]"),
    out: Path = typer.Option(None, help="Also write the differences as CSV (.csv) or JSON (.json)."),
    resamples: int = typer.Option(10_000, help="Bootstrap draws."),
    seed: int = typer.Option(0, help="Seed of the bootstrap draws."),
) -> None:
    """Whether models really differ: each against the first, item by item on every benchmark split both scored, the
    difference with a 95 % paired-bootstrap interval (`*`: it excludes zero) and an exact McNemar test.

    Example:

    \b
    compclip compare results/siglip results/c2lip
    compclip compare runs/siglip-s0,runs/siglip-s1 runs/c2lip-s0,runs/c2lip-s1 --label siglip --label c2lip
    """
    from .errors import UsageError
    from .eval.compare import compare as paired
    from .eval.compare import left_out, load_runs, markdown, table
    from .io import atomic_path

    if len(models) < 2:
        raise UsageError("compare needs two models or more: the baseline first")
    if label and len(label) != len(models):
        raise UsageError(f"--label names {len(label)} models, {len(models)} are given")
    if resamples < 100:
        raise UsageError(f"--resamples must be at least 100 for a 95 % interval, not {resamples}")
    items, names = load_runs(models, label or None)
    differences = [d for other in names[1:] for d in paired(items, names[0], other, resamples, seed)]
    for other in names[1:]:
        typer.echo(f"{other} against {names[0]}:")
        mine = [d for d in differences if d.b == other]
        typer.echo(markdown(mine, left_out(items, names[0], other, mine)))
    if out is not None:
        frame = table(differences)
        with atomic_path(out) as tmp:
            frame.to_json(tmp, orient="records", indent=1) if out.suffix == ".json" else frame.to_csv(tmp, index=False)
        typer.echo(f"wrote {out}")


data_app = typer.Typer(help="Benchmark data: download it, and list what each benchmark still lacks.", no_args_is_help=True)
app.add_typer(data_app, name="data")


@data_app.command("download")
def data_download(
    name: str = typer.Argument(..., metavar="NAME", help="A benchmark whose public files have pinned checksums: imagecode "
                                                         "and valse (their annotations: `compclip benchmarks` says where each "
                                                         "image set comes from), sugarcrepe, sugarcrepe_pp; or coco_val2017, "
                                                         "coco_captions."),
    data_root: Path = typer.Option(None, envvar="COMPCLIP_DATA", help="Benchmark data root (or COMPCLIP_DATA)."),
) -> None:
    """Fetch a dataset's official public files: resumable, verified by SHA-256.

    Example:

    \b
    compclip data download sugarcrepe --data-root data
    """
    from .eval.base import data_root as resolve_root
    from .eval.base import downloads
    from .eval.download import download

    for path in download(name, resolve_root(data_root), downloads()):
        typer.echo(f"ok {path}")


@data_app.command("check")
def data_check(data_root: Path = typer.Option(None, envvar="COMPCLIP_DATA", help="Benchmark data root (or COMPCLIP_DATA).")) -> None:
    """List, per benchmark, the annotation files and images it still lacks, and the files it cannot use (exit 1 then).

    Example:

    \b
    compclip data check --data-root data
    """
    from .data.images import image_ref
    from .errors import CompclipError
    from .eval import REGISTRY
    from .eval.base import Benchmark
    from .eval.base import data_root as resolve_root

    root = resolve_root(data_root)
    unusable = 0
    for name, bench in REGISTRY.items():
        lacks = bench.lacks(root, ())
        if lacks:
            typer.echo(f"{name}: {lacks}")
            continue
        if type(bench).images is Benchmark.images:  # no list of its images to check: "ready" would claim what was not checked
            typer.echo(f"{name}: its files are there; its images are not listed ahead (`compclip eval` names each set, shard or "
                       "image it cannot read)")
            continue
        try:  # one damaged annotation file is that benchmark's line, not the end of the check
            images = bench.images(root)
        except CompclipError as err:
            unusable += 1
            typer.echo(f"{name}: unusable: {err}")
            continue
        gone = [image_ref(p) for p in images if not image_ref(p).present()]
        shown = ", ".join(str(p.file.relative_to(root)) for p in gone[:3])
        typer.echo(f"{name}: ready" if not gone else f"{name}: {len(gone)} images missing, e.g. {shown}")
    if unusable:
        raise typer.Exit(1)


@data_app.command("ccneg")
def data_ccneg(
    root: Path = typer.Option(..., help="CC-Neg's release folder: ccneg_preprocessed.pt, distractor_image_mapping.pt and "
                                        "the images its paths name."),
    out: Path = typer.Option(..., help="The JSON lines file to write."),
    coco_images: Path = typer.Option(None, help="COCO train2017's image folder, where the distractors are (split train)."),
    coco_captions: Path = typer.Option(None, help="COCO's captions_train2017.json, which orders them (split train)."),
    split: str = typer.Option("train", help="train (with distractors) or eval (CC-Neg's last 40,000 records)."),
) -> None:
    """Write CC-Neg's release as JSON lines of image, caption, negated_caption and distractor_image, as CoN-CLIP reads it.

    Example:

    \b
    compclip data ccneg --root ccneg_dataset --coco-images coco/train2017 \\
        --coco-captions coco/annotations/captions_train2017.json --out ccneg_train.jsonl
    compclip train --recipe conclip-ccneg --train-data ccneg_train.jsonl
    """
    from .data import ccneg
    from .errors import UsageError

    if split not in ("train", "eval"):
        raise UsageError(f"--split {split!r}: train or eval")
    if split == "train" and (coco_images is None or coco_captions is None):
        raise UsageError("--split train reads the distractors from COCO train2017: give --coco-images and --coco-captions")
    written, skipped = ccneg.write_jsonl(root, coco_images, coco_captions, out, split)
    typer.echo(f"wrote {out}: {written} records" + (f"; skipped {dict(skipped)}" if skipped else ""))


world_app = typer.Typer(help="The synthetic binding world: scenes, captions, held-out pairings, benchmarks.", no_args_is_help=True)
app.add_typer(world_app, name="world")


@world_app.command("generate")
@declared(WorldConfig)
def world_generate(
    out: Path = typer.Option(..., help="Folder for train/, val/, test_seen/ and test_unseen/."),
    workers: int = typer.Option(2, help="Rendering processes."),
    **options: Any,
) -> None:
    """Generate the binding world (re-running with the same settings reuses it).

    Example:

    \b
    compclip world generate --out world --seed 1
    """
    from .world import generate

    typer.echo(f"world ready in {generate(out, WorldConfig(**declared_values(WorldConfig, options)), workers)}")


@app.command()
@declared(DemoConfig)
def demo(**options: Any) -> None:
    """The whole method on the binding world: pretrain, fine-tune per method, evaluate seen and unseen, report.

    Example:

    \b
    compclip demo --methods siglip,attswap,c2lip --seeds 0,1,2 --out runs/demo
    """
    from .demo import run_demo

    run_demo(DemoConfig(**declared_values(DemoConfig, options)))


def _refuse_flags_of_elsewhere(args: list[str]) -> None:
    """A flag of the tool a command stands in for (open_clip_train's to `compclip train`, CLIP_benchmark's to `compclip
    eval`) whose meaning another compclip flag has: an error naming that flag (click's would only say there is no such
    option, or point at one that merely looks alike)."""
    from .errors import UsageError
    from .eval.config import CLIP_BENCHMARK_ELSEWHERE
    from .train.config import OPEN_CLIP_ELSEWHERE

    tools = {"train": ("open_clip_train", OPEN_CLIP_ELSEWHERE), "eval": ("CLIP_benchmark", CLIP_BENCHMARK_ELSEWHERE)}
    command = next((a for a in args if a not in GLOBAL_FLAGS), None)
    if command not in tools:
        return
    tool, elsewhere = tools[command]
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in elsewhere:
            raise UsageError(f"{flag} is {tool}'s flag: {elsewhere[flag]}")


def _address_space_limit() -> int | None:
    """The process's address-space limit in bytes (`ulimit -v`), or None when there is none."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def _out_of_memory(e: BaseException) -> str | None:
    """The one line for an exception that means memory ran out, or None for any other: a library that could not map
    under `ulimit -v` (torch's own ImportError, or one a library raised from it: pandas' "no usable engine" when
    pyarrow could not load), Python's MemoryError, torch's CPU allocator refusing and CUDA running out."""
    chain, seen = [], e
    while seen is not None and len(chain) < 8:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    text = " ".join(str(x) for x in chain)
    unmapped = any(isinstance(x, ImportError) for x in chain) and "failed to map segment" in text
    spent = isinstance(e, MemoryError) or (isinstance(e, RuntimeError) and "can't allocate memory" in str(e))
    first = next((str(x).splitlines()[0] for x in chain if str(x) and ("map segment" in str(x) or x is e)), "out of memory")
    limit = _address_space_limit()
    if limit is not None and (unmapped or spent):
        culprit = next((x for x in chain if "map segment" in str(x)), e)
        return (f"error: {type(culprit).__name__}: {first}: this process may map {limit / (1 << 30):.1f} GiB (ulimit -v), less "
                "than torch and a model need; raise the limit (ulimit -v unlimited, or a larger --mem for a scheduler that sets it)")
    if spent:
        return (f"error: out of memory ({first}): this machine's memory is spent; lower --batch-size (or --workers), or run "
                "where there is more")
    torch = sys.modules.get("torch")  # (not imported here: an ImportError may be torch's own)
    if torch is not None and isinstance(e, torch.OutOfMemoryError):
        return f"error: {first}: lower --batch-size (--accum-freq keeps the step's size; --grad-checkpointing saves more)"
    return None


def main(argv: list[str] | None = None) -> None:
    """Console entry point: a problem the user can fix prints one `error:` line and exits 2, not a traceback."""
    from . import stops
    from .errors import CompclipError, Stopped
    from .extras import check_core

    stops.answer()
    args = list(sys.argv[1:] if argv is None else argv)
    # --quiet / --verbose belong to the app's callback; accept them after the command too
    args = [a for a in args if a in GLOBAL_FLAGS] + [a for a in args if a not in GLOBAL_FLAGS]
    try:
        check_core()
        _refuse_flags_of_elsewhere(args)
        code = app(args, prog_name="compclip", standalone_mode=False)
    except typer.TyperException as e:  # the command line itself: an unknown option, a missing or malformed value
        ctx = getattr(e, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        typer.echo(f"error: {e.format_message()}{hint}", err=True)
        raise SystemExit(e.exit_code) from None
    except CompclipError as e:
        typer.echo(f"{e.label}: {e}", err=True)
        raise SystemExit(e.exit_code) from None
    except (ImportError, MemoryError, RuntimeError) as e:
        said = _out_of_memory(e)
        if said is None:
            raise
        typer.echo(said, err=True)
        raise SystemExit(2) from None
    except Stopped as e:  # files are closed; leave past atexit's pool finalisers, which would wait on a killed worker's lock
        stops.end_children()
        typer.echo(f"{e.label}: {e}", err=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(e.exit_code)
    raise SystemExit(code if isinstance(code, int) else 0)
