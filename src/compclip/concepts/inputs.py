"""Captions from the inputs `compclip concepts` takes: any training-data format, each read by its own module."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import MissingFileError


def iter_captions(path: str | Path, caption_key: str = "caption") -> Iterator[Any]:
    """Stream the captions of a dataset file in any training-data format (`compclip.data.FORMATS`), stripped as the
    image-text readers strip them (so the trainer finds them in the store); records without one yield None (an empty
    record). The format, the file and a table's caption column are checked now, before anything is read."""
    from ..data import data_format  # (here: torch is imported with the readers)

    found = data_format(path)
    missing = found.missing_file(str(path))
    if missing:
        raise MissingFileError(f"{missing}: no such file")
    return (caption.strip() if isinstance(caption, str) else caption for caption in found.captions(str(path), caption_key))


def count_captions(path: str | Path) -> int | None:
    """How many captions `iter_captions` will give, for the progress bar's total: a file's rows or lines, read once more
    (seconds for millions of rows, against hours of parsing); None where only reading says (webdataset shards)."""
    from ..data import data_format

    return data_format(path).count(str(path))
