"""Decoded images in `.npy` arrays with their captions in a JSONL beside each: what `compclip world generate` writes
(its records hold a method's data fields too: the world's `dense_captions`, `negative_caption`, and `negative_image`, a
row of the `negative_image.npy` beside the images)."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import DataError, UsageError
from ..readers import FORMATS, DataFormat, ImageTextReader, field_kind, json_lines, part_of


def is_image_array(path: str | os.PathLike) -> bool:
    """An array of decoded images (`.npy`), or several joined by `::` (`ArrayReader`)."""
    return str(path).lower().endswith(".npy")


def captions_beside(array: Path) -> Path:
    """The captions of an array's images, one JSON line each, as `compclip world generate` writes them beside it."""
    return array.with_name("scenes.jsonl")


class ArrayReader(ImageTextReader):
    """Decoded images in a `.npy` array (uint8, N × H × W × 3), read memory-mapped, and their captions: the
    `caption` field of each line of a JSONL beside it (default `scenes.jsonl`), line i for image i (blank lines are no
    lines, as in every JSON lines file compclip reads), and the data fields a method declares from the same line.

    What `compclip world generate` writes for training: nothing is decoded while training. Several arrays
    joined by `::` (open_clip's way of naming several sources) read as one, each with the JSONL beside it,
    their records interleaved in proportion to their sizes, so that every batch mixes them alike.
    """

    def __init__(self, path: str | os.PathLike, transform: Callable | None = None, captions: str | os.PathLike | None = None,
                 caption_key: str = "caption", **stages: Any):
        self.paths = [Path(p) for p in str(path).split("::")]
        super().__init__(str(path), transform, **stages)
        if captions and len(self.paths) > 1:
            raise UsageError(f"{path}: several arrays take their captions from the scenes.jsonl beside each, not from {captions}")
        caption_paths = [Path(captions)] if captions else [captions_beside(p) for p in self.paths]
        self.images, self.captions, self.extras = [], [], []
        for array, lines in zip(self.paths, caption_paths, strict=True):
            for p in (array, lines):
                if not p.is_file():
                    raise DataError(f"{p}: no such file (an image array needs its captions JSONL beside it)")
            try:
                images = np.load(array, mmap_mode="r")
            except (ValueError, OSError, EOFError) as e:  # an object array (a pickle), a truncated or foreign file
                raise DataError(f"{array}: not an image array ({type(e).__name__}: {e}); expected uint8 images of shape "
                                "(N, H, W, 3), as `compclip world generate` writes them") from None
            if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
                raise DataError(f"{array}: expected uint8 images of shape (N, H, W, 3), found {images.dtype} {images.shape}")
            items = [item if isinstance(item, dict) else {} for _, item in json_lines(lines)]
            missing = [key for key in self.fields.values() if items and key not in items[0]]
            if missing:  # judged by the first record, as a JSONL's: a wrong key would otherwise skip every record
                raise DataError(f"{lines}: no field {missing} in its first record (fields: {list(items[0])}); set --field-key "
                                "NAME=KEY")
            captions_ = [item.get(caption_key) for item in items]
            if len(captions_) != len(images):
                raise DataError(f"{lines}: {len(captions_)} captions for the {len(images)} images of {array}")
            self.images.append(images)
            self.captions.append(captions_)
            self.extras.append([{name: item[key] for name, key in self.fields.items() if key in item} for item in items])
        self.field_arrays = self._field_arrays()
        sizes = [len(c) for c in self.captions]
        # record k of source s sits at (k + 0.5) / size: sorted together, the sources interleave evenly
        at = np.concatenate([(np.arange(n) + 0.5) / n for n in sizes])
        self.order = np.stack([np.repeat(np.arange(len(sizes)), sizes), np.concatenate([np.arange(n) for n in sizes])], 1)[
            np.argsort(at, kind="stable")]

    def _field_arrays(self) -> list[dict[str, np.ndarray]]:
        """Each source's arrays of the image fields the method declares: `KEY.npy` beside its images (the world's
        `negative_image.npy`), whose row the record's field names, memory-mapped as the images are."""
        found = []
        for array, images in zip(self.paths, self.images, strict=True):
            arrays = {}
            for name, key in self.fields.items():
                if field_kind(name) != "image":
                    continue
                path = array.with_name(f"{key}.npy")
                if not path.is_file():
                    raise DataError(f"{path}: no such file: the method reads an image field {name!r}, each record's row of "
                                    f"{key}.npy beside {array.name}")
                arrays[name] = np.load(path, mmap_mode="r")
                if arrays[name].dtype != np.uint8 or arrays[name].shape[1:] != images.shape[1:]:
                    raise DataError(f"{path}: expected uint8 images of shape (N, {', '.join(map(str, images.shape[1:]))}) as "
                                    f"{array.name}'s, found {arrays[name].dtype} {arrays[name].shape}")
            found.append(arrays)
        return found

    def __getstate__(self) -> dict[str, Any]:  # a DataLoader worker maps the arrays again
        return {k: v for k, v in self.__dict__.items() if k not in ("images", "field_arrays")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.images = [np.load(p, mmap_mode="r") for p in self.paths]
        self.field_arrays = self._field_arrays()

    def num_records(self) -> int:
        return len(self.order)

    def caption_at(self, index: int) -> Any:
        source, i = self.order[index].tolist()
        return self.captions[source][i]

    def record_at(self, index: int) -> tuple[str, Any, Any, Any]:
        source, i = self.order[index].tolist()
        extra = self.extras[source][i]
        if self.field_arrays[source]:
            extra = {**extra, **{name: self._row(self.field_arrays[source][name], extra[name])
                                 for name in self.field_arrays[source] if name in extra}}
        return f"{self.paths[source]}[{i}]", np.asarray(self.images[source][i]), self.captions[source][i], extra

    @staticmethod
    def _row(array: np.ndarray, row: Any) -> Any:
        """Row `row` of an image field's array; a value that is no row of it (null: the record has none) as it is, for the
        reader to skip and name."""
        if isinstance(row, int) and not isinstance(row, bool) and 0 <= row < len(array):
            return np.asarray(array[row])
        return row

    def records(self):
        for k in part_of(range(len(self.order)), *self.shard()):
            yield self.record_at(k)


def _files(path: str) -> list[str]:
    """Each array and the captions beside it."""
    return [str(f) for a in path.split("::") for f in (Path(a), captions_beside(Path(a)))]


def _captions(path: str, caption_key: str) -> Iterator[Any]:
    reader = ArrayReader(path, caption_key=caption_key)
    return (reader.caption_at(k) for k in range(reader.num_records()))


FORMATS.register("image_array", DataFormat(
    "image_array", "an image .npy", is_image_array, ArrayReader, ("caption_key",), _captions,
    count=lambda path: ArrayReader(path).num_records(), files=_files, joins=True, decoded=True, fields=True))
