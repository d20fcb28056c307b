"""Where a benchmark's image lives: a file of its own, or bytes inside a data file (a Parquet cell of a Hub release).

Benchmarks hand the scorer `ImageRef`s (or plain paths), so images released inside Parquet shards are read
from their bytes, nothing extracted to disk, and are named, missed and cached like files.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from .readers import decode_image


@dataclass(frozen=True)
class ImageRef:
    """`file` alone: an image file. With `member`: the image whose bytes (`data`) sit at `member` of `file`
    (e.g. "row 12, image_0" of a Parquet shard); the file then names it and dates it for the embedding cache.
    `colours`: how its pixels become RGB (`compclip.data.readers.RGB_RULES`); CLIP_benchmark's layouts read theirs as
    CLIP_benchmark does, and the scorer keeps the two apart (`compclip.scoring._image_key`)."""

    file: Path
    member: str = ""
    data: bytes | None = field(default=None, repr=False, compare=False)
    colours: str = "viewer"

    @property
    def key(self) -> str:
        return f"{self.file}::{self.member}" if self.member else str(self.file)

    def __str__(self) -> str:
        return self.key

    def present(self) -> bool:
        return bool(self.data) if self.member else self.file.is_file()

    def decode(self) -> Image.Image:
        return decode_image(self.data if self.member else self.file, self.colours)


def image_ref(image: ImageRef | str | os.PathLike) -> ImageRef:
    return image if isinstance(image, ImageRef) else _file_ref(image)


@functools.lru_cache(maxsize=1 << 16)
def _file_ref(image: str | os.PathLike) -> ImageRef:
    """A file's reference, made once: a benchmark names one image in many items, each named several times in an
    evaluation, and parsing the path anew each time took a fifth of an evaluation of small images."""
    return ImageRef(Path(image))
