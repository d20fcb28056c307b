"""Captions from the inputs `compclip concepts` takes: CSV/TSV, JSONL, webdataset shards, COCO captions JSON."""
from __future__ import annotations

import csv
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..data.readers import undecodable
from ..data.table import open_table, table_rows
from ..errors import DataError, MissingFileError, UsageError

log = logging.getLogger("compclip.concepts")


def iter_captions(path: str | Path, caption_key: str = "caption") -> Iterator[Any]:
    """Stream the captions of a dataset file, stripped as the image-text readers strip them (so
    the trainer finds them in the store); records without one yield None (an empty record).
    The format, the file and a CSV's caption column are checked now, before anything is read."""
    return (caption.strip() if isinstance(caption, str) else caption for caption in _raw_captions(path, caption_key))


def _raw_captions(path: str | Path, caption_key: str) -> Iterator[Any]:
    from ..data import FolderReader, WebDatasetReader, is_tar_shards

    text = str(path)
    suffix = Path(text).suffix.lower()
    if is_tar_shards(text):
        return (caption for _, _, caption, _ in WebDatasetReader(text, caption_field=caption_key).records())
    if suffix not in (".csv", ".tsv", ".tab", ".jsonl", ".json"):
        raise UsageError(f"{path}: unknown input format; expected .csv/.tsv, .jsonl, .tar shards or a captions .json")
    if not Path(text).is_file():
        raise MissingFileError(f"{path}: no such file")
    if suffix == ".jsonl":
        return _jsonl_captions(Path(text), caption_key)
    if suffix == ".json":
        return (caption for _, _, caption in FolderReader(text).pairs)
    return _csv_captions(Path(text), caption_key)


def count_captions(path: str | Path) -> int | None:
    """How many captions `iter_captions` will give, for the progress bar's total: a file's rows or lines, read once more
    (seconds for millions of rows, against hours of parsing); None for webdataset shards, which say only by being read."""
    from ..data import FolderReader, is_tar_shards

    text = str(path)
    suffix = Path(text).suffix.lower()
    if is_tar_shards(text) or not Path(text).is_file():
        return None
    if suffix == ".jsonl":
        with open(text, "rb") as f:
            return sum(1 for line in f if line.strip())
    if suffix == ".json":
        return len(FolderReader(text).pairs)
    return sum(1 for _ in table_rows(Path(text), "\t" if suffix in (".tsv", ".tab") else ","))


def _readable(caption: Any, where: str, seen: list[int]) -> Any:
    """The trainer's rule for a caption whose bytes are not UTF-8: skipped (an empty record here), the first one named."""
    if isinstance(caption, str) and undecodable(caption):
        seen[0] += 1
        if seen[0] == 1:
            log.warning("%s: skipped a caption whose bytes are not UTF-8, as training skips it (more are counted, not named)", where)
        return None
    return caption


def _csv_captions(path: Path, caption_key: str) -> Iterator[Any]:
    sep = "\t" if path.suffix.lower() in (".tsv", ".tab") else ","
    with open_table(path) as f:
        columns = csv.DictReader(f, delimiter=sep).fieldnames or []
    if caption_key not in columns:
        raise DataError(f"{path}: no column {caption_key!r} (columns: {columns}); set --caption-key")
    return _csv_column(path, sep, caption_key)


def _csv_column(path: Path, sep: str, caption_key: str) -> Iterator[Any]:
    seen = [0]
    for number, row, malformed in table_rows(path, sep):
        if malformed:
            log.warning("%s:%d: %s: skipped", path, number, malformed)
        yield _readable(row.get(caption_key), f"{path}:{number}", seen) if row is not None else None


def _jsonl_captions(path: Path, caption_key: str) -> Iterator[Any]:
    seen = [0]
    with open(path, encoding="utf-8-sig", errors="surrogateescape") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                yield None
                continue
            yield _readable(item.get(caption_key) if isinstance(item, dict) else item, f"{path}:{number}", seen)
