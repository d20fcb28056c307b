"""An image folder with a captions JSON: COCO's captions format, a list of records, or a filename-to-caption map."""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...errors import DataError
from ..readers import FORMATS, DataFormat, ImageTextReader, image_path, part_of


def coco_files(path: str | os.PathLike, images: list[Any]) -> dict[Any, Any]:
    """COCO's image id to file name, from the `images` list of the captions file `path`. An id given two files is
    refused: its captions would all be paired with the later file, and the other's dropped, without a word."""
    files: dict[Any, Any] = {}
    for k, im in enumerate(images):
        if not isinstance(im, dict):
            continue
        id_, name = im.get("id"), im.get("file_name")
        if files.setdefault(id_, name) != name:
            raise DataError(f"{path}: images[{k}] names image id {id_!r} {name!r}, an earlier record "
                            f"{files[id_]!r}: its captions cannot say which file they describe")
    return files


class FolderReader(ImageTextReader):
    """An image folder with a captions JSON.

    The JSON is COCO's captions format (`images` + `annotations`), a list of
    `{"image": ..., "caption": ... | "captions": [...]}`, or a `{filename: caption(s)}` map.
    Each (image, caption) pair is one sample.
    """

    def __init__(self, captions: str | os.PathLike, image_root: str | os.PathLike | None = None, transform: Callable | None = None,
                 **stages: Any):
        self.captions_path = Path(captions)
        super().__init__(str(self.captions_path), transform, **stages)
        self.image_root = Path(image_root) if image_root else self.captions_path.parent
        try:
            data = json.loads(self.captions_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DataError(f"{self.captions_path}: unreadable captions JSON: {e}") from None
        self.pairs = list(self._pairs(data))

    def _pairs(self, data: Any) -> Iterator[tuple[str, Any, Any]]:
        if isinstance(data, dict) and "annotations" in data and "images" in data:  # COCO
            bad = [key for key in ("images", "annotations") if not isinstance(data[key], list)]
            if bad:
                raise DataError(f"{self.captions_path}: COCO captions whose \"{bad[0]}\" is {type(data[bad[0]]).__name__}, not a "
                                "list of records")
            files = coco_files(self.captions_path, data["images"])
            for i, ann in enumerate(data["annotations"]):
                ann = ann if isinstance(ann, dict) else {}
                yield f"annotations[{i}]", files.get(ann.get("image_id")), ann.get("caption")
        elif isinstance(data, dict):
            for name, caps in data.items():
                yield from self._expand(f"[{name!r}]", name, caps)
        elif isinstance(data, list):
            for i, rec in enumerate(data):
                rec = rec if isinstance(rec, dict) else {}
                yield from self._expand(f"[{i}]", rec.get("image"), rec.get("captions", rec.get("caption")))
        else:
            raise DataError(f"{self.captions_path}: expected COCO captions, a list of records or a filename-to-caption map")

    @staticmethod
    def _expand(where: str, name: Any, captions: Any) -> Iterator[tuple[str, Any, Any]]:
        if isinstance(captions, list):
            for j, caption in enumerate(captions):
                yield f"{where}[{j}]", name, caption
        else:
            yield where, name, captions

    def num_records(self) -> int:
        return len(self.pairs)

    def record_at(self, index: int) -> tuple[str, Any, Any, Any]:
        where, name, caption = self.pairs[index]
        image = image_path(self.image_root, name) if isinstance(name, str) and name.strip() else None
        return f"{self.captions_path} {where}", image, caption, None

    def records(self):
        for i in part_of(range(len(self.pairs)), *self.shard()):
            yield self.record_at(i)


FORMATS.register("captions_json", DataFormat(
    "captions_json", "a captions .json (COCO's, records, or a filename-to-caption map)", lambda path: Path(path).suffix.lower() == ".json",
    FolderReader, ("image_root",), lambda path, caption_key: (caption for _, _, caption in FolderReader(path).pairs),
    count=lambda path: len(FolderReader(path).pairs)))
