"""Rows of a CSV or TSV file, as open_clip's `CsvDataset` reads them (pandas' quoting: a field may be quoted, a quoted
field may span lines), except that a quote opened and never closed is an error: Python's `csv` would otherwise read the
rest of the file as one field, and every row after it would be lost without a word."""
from __future__ import annotations

import csv
import sys
from array import array
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..errors import DataError
from .lines import TextLines


def open_table(path: Path):
    # surrogateescape keeps undecodable bytes visible, so one bad row is skipped, not the file; a BOM is not part of the
    # first column
    return open(path, newline="", encoding="utf-8-sig", errors="surrogateescape")


def table_rows(path: Path, sep: str, at: tuple[int, int] | None = None,
               header: list[str] | None = None) -> Iterator[tuple[int, dict | None, str | None]]:
    """(line number, row, None) for every row of `path` after its header (csv.DictReader's rows), or (line number, None,
    what is wrong) for a row whose quoting is malformed; a quote still open at the end of the file is a `DataError`.
    From `at` on when given (a row's byte offset and line number, as `row_starts` keeps them, read with the file's
    `header`): the rows from that one on, numbered as reading from the start numbers them."""
    for _, line, row, malformed in _rows(path, sep, at, header):
        yield line, row, malformed


def row_starts(path: Path, sep: str) -> tuple[np.ndarray, list[str]]:
    """Where each row of `table_rows` starts: an (N, 2) int64 array of its byte offset and line number, 16 bytes a row
    (what a reader keeps to read any row again, `table_rows(..., at=...)`), and the header to read the rows with."""
    csv.field_size_limit(sys.maxsize)
    with TextLines(path) as lines:
        names = csv.reader(lines, delimiter=sep, strict=True)
        try:
            header = next(names, [])
        except csv.Error as e:
            raise DataError(f"{path}:1: the header's quoting is malformed ({e})") from None
        after = (lines.at, names.line_num + 1)
    starts = array("q")  # 16 bytes a row while it is found too, where a list of pairs took 120
    for at, line, _, _ in _rows(path, sep, after, header):
        starts.extend((at, line))
    return np.frombuffer(starts, dtype=np.int64).reshape(-1, 2), header


def _rows(path: Path, sep: str, at: tuple[int, int] | None,
          header: list[str] | None) -> Iterator[tuple[int, int, dict | None, str | None]]:
    """`table_rows`' rows, each after the byte offset it starts at (from the file's start, that of the first row is the
    header's: only a start `at` a row gives them all)."""
    csv.field_size_limit(sys.maxsize)
    with TextLines(path, at[0] if at else 0) as lines:
        rows = csv.DictReader(lines, fieldnames=header, delimiter=sep, strict=True)
        before = at[1] - 1 if at else 0  # lines before the first one read, which DictReader's line_num counts from
        start = at[1] if at else 2
        while True:
            offset = lines.at
            try:
                row = next(rows)
            except StopIteration:
                return
            except csv.Error as e:
                if "end of data" in str(e):
                    raise DataError(f"{path}:{start}: a field opens a quote (\") that never closes: every line after it would be "
                                    "read as one caption; close the quote, or double a quote that belongs to the caption "
                                    "(\"\")") from None
                yield offset, start, None, f"malformed quoting ({e})"
            else:
                yield offset, start, row, None
            start = before + rows.line_num + 1
