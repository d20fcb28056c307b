"""JSON lines of image paths and captions, a record a line (`{"image": "a.jpg", "caption": "a red couch"}`): what caption
dumps and metadata exports often are. Images are found as a CSV's (relative to the file's folder or `--image-root`), and
`--image-key` / `--caption-key` name the fields. A record may hold the data fields a method declares, lists of texts
(DAC's `{"dense_captions": ["...", ...]}`), a text or an image path found as the image's is (TripletCLIP's
`{"negative_image": "neg/1.jpg", "negative_caption": "..."}`), each under its name or the key `--field-key NAME=KEY` gives."""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import DataError
from ..readers import FORMATS, DataFormat, TextTableReader, field_kind, image_path, json_line_starts, json_lines, utf8_captions


class JsonlReader(TextTableReader):
    """A JSONL of image paths and captions; a line that is no JSON record is a bad record, skipped and counted."""

    def __init__(self, path: str | os.PathLike, transform: Callable | None = None, image_key: str = "image", caption_key: str = "caption",
                 image_root: str | os.PathLike | None = None, **stages: Any):
        self.path = Path(path)
        super().__init__(str(self.path), transform, **stages)
        self.image_key, self.caption_key = image_key, caption_key
        self.image_root = Path(image_root) if image_root else self.path.parent
        first = next((value for _, value in json_lines(self.path) if isinstance(value, dict)), None)
        missing = [k for k in (image_key, caption_key, *self.fields.values()) if first is not None and k not in first]
        if missing:  # judged by the first record, as a CSV by its header: a wrong key would otherwise skip every record
            raise DataError(f"{self.path}: no field {missing} in its first record (fields: {list(first)}); set --image-key / "
                            "--caption-key / --field-key NAME=KEY")

    def _starts(self) -> np.ndarray:
        return json_line_starts(self.path)

    def _rows_of(self, at: tuple[int, int] | None = None) -> Iterator[tuple[str, Any, Any, str | None]]:
        for where, value in json_lines(self.path, at):
            if isinstance(value, json.JSONDecodeError):
                yield where, None, None, f"not JSON ({value})"
            elif not isinstance(value, dict):
                yield where, None, None, f"a JSON {type(value).__name__}, not a record"
            else:
                rel = value.get(self.image_key)
                yield where, self._image(rel) if isinstance(rel, str) else None, value.get(self.caption_key), None, \
                    {name: self._image(value[key]) if field_kind(name) == "image" else value[key]
                     for name, key in self.fields.items() if key in value} or None

    def _image(self, rel: Any) -> Path | None:
        """An image path of a record (the image's, or an image field's) as found from the file's folder or `--image-root`;
        None where there is none; a value that is no path as it is, for the reader to skip and name."""
        if isinstance(rel, str):
            return image_path(self.image_root, rel.strip()) if rel.strip() else None
        return rel


def captions(path: str, caption_key: str) -> Iterator[Any]:
    """Each line's caption (None for a line that is no JSON record)."""
    return utf8_captions((where, value.get(caption_key) if isinstance(value, dict) else None) for where, value in json_lines(Path(path)))


FORMATS.register("jsonl", DataFormat(
    "jsonl", ".jsonl", lambda path: Path(path).suffix.lower() == ".jsonl", JsonlReader, ("image_key", "caption_key", "image_root"),
    captions, count=lambda path: sum(1 for _ in json_lines(Path(path))), fields=True))
