"""The `compclip` command line (typer). Subcommands import their heavy modules lazily."""
from __future__ import annotations

from pathlib import Path

import typer

from . import __version__, progress

app = typer.Typer(
    name="compclip",
    help="Make contrastive vision-language models compositional: concepts, fine-tuning, evaluation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _options(
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Hide progress bars and informational logs."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logs."),
) -> None:
    progress.configure(quiet=quiet, verbose=verbose)


@app.command()
def version() -> None:
    """Print the versions of compclip and the libraries it drives."""
    import importlib.metadata as md

    typer.echo(f"compclip {__version__}")
    for dist in ("torch", "open-clip-torch", "timm", "spacy", "webdataset"):
        try:
            typer.echo(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            typer.echo(f"{dist} (not installed)")


@app.command()
def export(
    checkpoint: Path = typer.Argument(..., help="A compclip checkpoint folder."),
    out: Path = typer.Argument(..., help="The .safetensors file to write."),
) -> None:
    """Write a checkpoint as a plain open_clip state dict that open_clip and CLIP_benchmark load."""
    from .models import export_open_clip

    usage = export_open_clip(checkpoint, out)
    typer.echo(f"wrote {out}; load it with open_clip alone:\n{usage}")


@app.command()
def concepts(
    input: Path = typer.Argument(..., help="Captions: .csv/.tsv, .jsonl, webdataset .tar shards, or a COCO captions .json."),
    out: Path = typer.Option(..., "--out", help="The concept store folder (Parquet shards); re-runs reuse it."),
    what: str = typer.Option("noun-phrases,pos,graph,keywords", help="Fields: noun-phrases, pos, graph, keywords."),
    workers: int = typer.Option(2, help="Parser processes."),
    caption_key: str = typer.Option("caption", help="Caption column (CSV/TSV), key (JSONL) or json field (shards)."),
    with_prep: bool = typer.Option(False, "--with-prep", help="Keep a prepositional modifier: 'a man in a red shirt'."),
    shard_size: int = typer.Option(20_000, help="Records per Parquet shard: the unit a killed run resumes from."),
) -> None:
    """Extract concepts for every caption of INPUT into a cached, resumable store."""
    from .concepts import build_store, iter_captions

    _, stats = build_store(
        iter_captions(input, caption_key), out, what, with_prep=with_prep, workers=workers, shard_size=shard_size
    )
    typer.echo(
        f"{stats['captions']} captions: {stats['parsed']} parsed, the rest cached or repeated; "
        f"{stats['shards_written']} shards written to {out} ({stats['captions_per_s']:.0f} captions/s)"
    )


@app.command()
def demo(
    out: Path = typer.Option(Path("runs/demo"), help="Where the demo writes its data, checkpoint and export."),
    steps: int = typer.Option(150, help="Fine-tuning steps."),
    seed: int = typer.Option(0),
) -> None:
    """End-to-end smoke run: data, reader, model, a few training steps, checkpoint, export."""
    from .demo import run_demo

    run_demo(out, steps=steps, seed=seed)


def main() -> None:
    """Console entry point: user errors print one clear line instead of a traceback."""
    from .models import CheckpointMismatchError

    try:
        app()
    except (ValueError, FileNotFoundError, CheckpointMismatchError) as e:
        typer.echo(f"error: {e}", err=True)
        raise SystemExit(2) from None
