"""CSV and TSV tables of image paths and captions: open_clip's `--dataset-type csv` (`--csv-img-key`, `--csv-caption-key`
are compclip's `--image-key`, `--caption-key`)."""
from __future__ import annotations

import csv
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import DataError
from ..readers import FORMATS, DataFormat, TextTableReader, image_path, log, utf8_captions
from ..table import open_table, row_starts, table_rows

SUFFIXES = (".csv", ".tsv", ".tab")


def separator(path: str | os.PathLike) -> str:
    return "\t" if Path(path).suffix.lower() in (".tsv", ".tab") else ","


class CsvReader(TextTableReader):
    """A CSV or TSV of image paths (relative to the file's folder or `image_root`, see `image_path`) and captions."""

    def __init__(
        self,
        path: str | os.PathLike,
        transform: Callable | None = None,
        image_key: str = "image",
        caption_key: str = "caption",
        sep: str | None = None,
        image_root: str | os.PathLike | None = None,
        **stages: Any,
    ):
        self.path = Path(path)
        super().__init__(str(self.path), transform, **stages)
        self.image_key, self.caption_key = image_key, caption_key
        self.sep = sep or separator(self.path)
        self.image_root = Path(image_root) if image_root else self.path.parent
        with self._open() as f:
            columns = next(csv.reader(f, delimiter=self.sep), [])
        missing = [k for k in (image_key, caption_key) if k not in columns]
        if missing:
            raise DataError(f"{self.path}: no column {missing} (columns: {columns}); set --image-key / --caption-key")

    def _open(self):
        return open_table(self.path)

    def _starts(self) -> np.ndarray:
        starts, self._header = row_starts(self.path, self.sep)
        return starts

    def _rows_of(self, at: tuple[int, int] | None = None) -> Iterator[tuple[str, Any, Any, str | None]]:
        if at is not None:
            self._index()  # the header a row's start is read with
        for line, row, malformed in table_rows(self.path, self.sep, at, self._header if at else None):
            where = f"{self.path}:{line}"
            if malformed:
                yield where, None, None, malformed
            elif None in row or None in row.values():  # DictReader's marks of a long or short row
                fields = sum(v is not None for k, v in row.items() if k is not None) + len(row.get(None, []))
                yield where, None, None, f"{fields} fields, header has {len(row) - (None in row)}"
            else:
                rel = row[self.image_key].strip()
                yield where, image_path(self.image_root, rel) if rel else None, row[self.caption_key], None


def captions(path: str, caption_key: str) -> Iterator[Any]:
    """The caption column alone; its absence is an error now, before anything is read."""
    sep = separator(path)
    with open_table(Path(path)) as f:
        columns = csv.DictReader(f, delimiter=sep).fieldnames or []
    if caption_key not in columns:
        raise DataError(f"{path}: no column {caption_key!r} (columns: {columns}); set --caption-key")
    return utf8_captions(_column(Path(path), sep, caption_key))


def _column(path: Path, sep: str, caption_key: str) -> Iterator[tuple[str, Any]]:
    for number, row, malformed in table_rows(path, sep):
        if malformed:
            log.warning("%s:%d: %s: skipped", path, number, malformed)
        yield f"{path}:{number}", row.get(caption_key) if row is not None else None


FORMATS.register("csv", DataFormat(
    "csv", ".csv/.tsv", lambda path: Path(path).suffix.lower() in SUFFIXES, CsvReader, ("image_key", "caption_key", "image_root"),
    captions, count=lambda path: sum(1 for _ in table_rows(Path(path), separator(path)))))
