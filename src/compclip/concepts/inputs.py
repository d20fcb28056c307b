"""Captions from the inputs `compclip concepts` takes: CSV/TSV, JSONL, webdataset shards, COCO captions JSON."""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any, Iterator


def iter_captions(path: str | Path, caption_key: str = "caption") -> Iterator[Any]:
    """Stream the captions of a dataset file, stripped as the image-text readers strip them (so
    the trainer finds them in the store); records without one yield None (an empty record)."""
    for caption in _raw_captions(path, caption_key):
        yield caption.strip() if isinstance(caption, str) else caption


def _raw_captions(path: str | Path, caption_key: str) -> Iterator[Any]:
    from ..data import FolderReader, WebDatasetReader, is_tar_shards

    text = str(path)
    suffix = Path(text).suffix.lower()
    if is_tar_shards(text):
        yield from (caption for _, _, caption in WebDatasetReader(text, caption_field=caption_key).records())
    elif suffix in (".csv", ".tsv", ".tab"):
        yield from _csv_captions(Path(text), caption_key)
    elif suffix == ".jsonl":
        yield from _jsonl_captions(Path(text), caption_key)
    elif suffix == ".json":
        yield from (caption for _, _, caption in FolderReader(text).pairs)
    else:
        raise ValueError(f"{path}: unknown input format; expected .csv/.tsv, .jsonl, .tar shards or a captions .json")


def _csv_captions(path: Path, caption_key: str) -> Iterator[Any]:
    csv.field_size_limit(sys.maxsize)
    sep = "\t" if path.suffix.lower() in (".tsv", ".tab") else ","
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = csv.DictReader(f, delimiter=sep)
        if caption_key not in (rows.fieldnames or []):
            raise ValueError(f"{path}: no column {caption_key!r} (columns: {rows.fieldnames}); set --caption-key")
        for row in rows:
            yield row.get(caption_key)


def _jsonl_captions(path: Path, caption_key: str) -> Iterator[Any]:
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                yield None
                continue
            yield item.get(caption_key) if isinstance(item, dict) else item
