"""Rows of a CSV or TSV file, as open_clip's `CsvDataset` reads them (pandas' quoting: a field may be quoted, a quoted
field may span lines), except that a quote opened and never closed is an error: Python's `csv` would otherwise read the
rest of the file as one field, and every row after it would be lost without a word."""
from __future__ import annotations

import csv
import sys
from collections.abc import Iterator
from pathlib import Path

from ..errors import DataError


def open_table(path: Path):
    # surrogateescape keeps undecodable bytes visible, so one bad row is skipped, not the file; a BOM is not part of the
    # first column
    return open(path, newline="", encoding="utf-8-sig", errors="surrogateescape")


def table_rows(path: Path, sep: str) -> Iterator[tuple[int, dict | None, str | None]]:
    """(line number, row, None) for every row of `path` after its header (csv.DictReader's rows), or (line number, None,
    what is wrong) for a row whose quoting is malformed; a quote still open at the end of the file is a `DataError`."""
    csv.field_size_limit(sys.maxsize)
    with open_table(path) as f:
        rows = csv.DictReader(f, delimiter=sep, strict=True)
        start = 2
        while True:
            try:
                row = next(rows)
            except StopIteration:
                return
            except csv.Error as e:
                if "end of data" in str(e):
                    raise DataError(f"{path}:{start}: a field opens a quote (\") that never closes: every line after it would be "
                                    "read as one caption; close the quote, or double a quote that belongs to the caption "
                                    "(\"\")") from None
                yield start, None, f"malformed quoting ({e})"
            else:
                yield start, row, None
            start = rows.line_num + 1
