"""Streaming image-text readers: CSV/TSV, webdataset tar shards, an image folder with a captions JSON,
and an array of decoded images (`.npy`) with a JSONL of captions.

Each is a torch IterableDataset yielding `{"image", "caption", "key"}` dicts. A reader is one record source per format
(`records`: this part's raw records, the part taken by `part_of`), then the same stages for all, in `__iter__`: shuffle,
resume, decode (with a per-sample seed), partner; webdataset shards may be resampled instead of read in order. The
stages are set by constructor arguments, the position a run resumes at by `start`. Bad records (missing or corrupt
images, empty or undecodable captions, malformed rows) are skipped and counted, never fatal; see `SkipCounter`.
"""
from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import os
import random
import re
import stat
import tarfile
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from PIL import Image, UnidentifiedImageError
from torch.utils.data import IterableDataset, get_worker_info

from ..errors import DataError, UsageError
from .concept_records import record_from_json
from .skips import SkipCounter
from .table import open_table, table_rows

SEED_SPAN = 1 << 63  # torch's generators take a seed below 2**63: a --seed of 10 or more passed it, and training stopped
IMAGE_EXTS = ("jpg", "jpeg", "png", "webp", "gif", "tif", "tiff", "bmp")  # open_clip's four, and what else PIL decodes
Sample = dict[str, Any]


def shard_position(rotation: int = 0) -> tuple[int, int]:
    """(index, count) of this process among all DDP ranks × DataLoader workers.

    `rotation` shifts which worker plays which part, so a resumed run whose next batch is due
    from worker k can start with DataLoader worker 0 and keep the original batch order.
    """
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_available() and dist.is_initialized() else (0, 1)
    info = get_worker_info()
    wid, nworkers = (info.id, info.num_workers) if info is not None else (0, 1)
    return rank * nworkers + (wid + rotation) % nworkers, world * nworkers


def image_path(root: Path, name: str, folders: tuple[str, ...] = ("images",)) -> Path:
    """`root/name`, or `root/<folder>/name` for the first of `folders` where only that exists: the one rule by which
    every reader and benchmark finds a dataset's images (Flickr, COCO and the retrieval sets ship an `images/` folder,
    Flickr30k's archive a `flickr30k-images/`)."""
    for candidate in (root / name, *(root / folder / name for folder in folders)):
        if candidate.exists():
            return candidate
    return root / name


class ImageTooLarge(ValueError):
    """An image of more pixels than PIL decodes without a decompression-bomb warning (`Image.MAX_IMAGE_PIXELS`)."""


_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFDIR: "a folder", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket"}


def decode_image(source: str | os.PathLike | bytes) -> Image.Image:
    """Fully decode an image (so truncated files fail here, not later) and convert to RGB. One larger than PIL's
    decompression-bomb limit is refused (`ImageTooLarge`) before it is decoded."""
    kind = None if isinstance(source, bytes) else stat.S_IFMT(os.stat(source).st_mode)
    if kind not in (None, stat.S_IFREG):  # opening a FIFO would wait for a writer, forever
        raise ValueError(f"not a regular file ({_KINDS.get(kind, 'a special file')})")
    fp = io.BytesIO(source) if isinstance(source, bytes) else source
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            img = Image.open(fp)
        except (Image.DecompressionBombWarning, Image.DecompressionBombError) as e:
            size = re.search(r"\((\d+) pixels\)", str(e))  # PIL's message; its DOS warning is no news after the first
            pixels = f"{int(size.group(1)):,} pixels" if size else str(e)
            raise ImageTooLarge(f"{pixels}, over the {Image.MAX_IMAGE_PIXELS:,} PIL decodes safely") from None
    with img:
        img.load()
        return to_rgb(img)


def to_rgb(img: Image.Image) -> Image.Image:
    """An image of any PIL mode as 8-bit RGB in a viewer's colours (its EXIF orientation is not applied, as open_clip
    reads images): 16- and 32-bit integer greys scaled to 0-255 (PIL's
    own conversion clips them, so a 16-bit PNG turns white), float greys in [0, 1] scaled by 255 (otherwise clipped),
    transparency composited over white (PIL drops the alpha and shows what the transparent pixels hide), CMYK and
    the rest by PIL's conversion."""
    if img.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I", "F"):
        grey = np.asarray(img, dtype=np.float64)
        if img.mode.startswith("I;16"):
            grey = grey / 257
        elif img.mode == "F" and np.nanmax(grey, initial=0) <= 1:
            grey = grey * 255
        elif img.mode == "I" and grey.max(initial=0) > 255:  # a 16-bit grey PIL opened as 32-bit
            grey = grey / (257 if grey.max() <= 65535 else grey.max() / 255)
        grey = np.clip(np.nan_to_num(grey), 0, 255).round().astype(np.uint8)
        return Image.fromarray(grey).convert("RGB")
    if img.mode in ("RGBA", "LA", "PA", "La", "RGBa") or (img.mode in ("P", "L", "RGB") and "transparency" in img.info):
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return img.convert("RGB")


_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def undecodable(text: str) -> bool:
    """Text read with `errors="surrogateescape"` that held bytes which are not UTF-8: every reader skips it."""
    return bool(_ESCAPED_BYTE.search(text))


def _bad_caption(caption: Any) -> str | None:
    if caption is None:
        return "empty_caption"
    if not isinstance(caption, str):
        return "bad_record"
    if undecodable(caption):  # surrogate-escaped bytes: not UTF-8
        return "undecodable_text"
    if not caption.strip():
        return "empty_caption"
    return None


def part_of(items: Iterable[Any], index: int, count: int) -> Iterator[Any]:
    """Every `count`-th item from `index` on: a process's (and DataLoader worker's) part of the data, `shard_position`'s."""
    return itertools.islice(items, index, None, count)


def shuffled(items: Iterator[Any], size: int, rng: random.Random) -> Iterator[Any]:
    """`items` through a buffer of `size`: each new item takes the place of a random one, which is yielded."""
    buffer: list[Any] = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        j = rng.randrange(size)
        yield buffer[j]
        buffer[j] = item
    rng.shuffle(buffer)
    yield from buffer


class ImageTextReader(IterableDataset):
    """Shared machinery: sharding, decoding, skip accounting. Subclasses list raw records.

    Samples carry `shard` (this process's part of the data) and `pos` (the record's index in
    that part), so a trainer can record how far each part was consumed and resume there (`start`).

    - `sample_seed`: each sample's random augmentation is seeded from (seed + epoch, shard, pos), so it does not
      depend on where a run started.
    - `shuffle` > 1: each shard's records pass through a shuffle buffer of that many (webdataset's kind, as open_clip
      uses), seeded from (seed, epoch, shard): a file sorted by class still trains mixed, and positions count the
      shuffled order, so resuming stays exact.
    - `admit`: a caption it refuses is skipped (and counted) before its image is decoded (a method that trains on
      some captions only, a keyword's subset).
    - `partners`: each sample also carries a `partner` drawn from the whole data (`record_at`; refused here for a
      reader that cannot draw one).
    - `resampled` (webdataset shards): samples an epoch, drawn with replacement (0: each shard once, in order).

    Each pass ends by moving the reader to the next epoch (resume positions and rotation
    cleared), so persistent DataLoader workers, which keep their own copy, need no word from
    the main process between epochs.
    """

    def __init__(self, name: str, transform: Callable | None = None, *, sample_seed: int | None = None, shuffle: int = 0,
                 admit: Callable[[str], bool] | None = None, partners: bool = False, resampled: int = 0):
        super().__init__()
        self.name, self.transform = name, transform
        self.skips = SkipCounter(name)
        self.sample_seed, self.shuffle, self.admit, self.partners, self.resampled = sample_seed, shuffle, admit, partners, resampled
        self.start()

    def start(self, epoch: int = 0, positions: dict[int, int] | None = None, rotation: int = 0) -> None:
        """Where the next pass begins: its epoch, each shard's records to skip undecoded, and which DataLoader worker takes
        the first batch (`rotation`, so the batches after a resume come in the order they would have)."""
        self.epoch, self.resume_positions, self.worker_rotation = epoch, dict(positions or {}), rotation

    def check_partners(self) -> None:
        """Partners are drawn from the whole data: a reader that cannot reach any record says so now, not in a worker."""
        if self.partners and not self.random_access:
            self.record_at(0)

    def num_records(self) -> int:
        """Records in one pass over the data, bad ones included (what `--epochs` counts, as open_clip counts samples)."""
        raise UsageError(f"--epochs over {self.name}: shards do not say how many samples they hold; give --train-num-samples "
                         "(as open_clip_train asks), or --steps")

    def admitted_records(self) -> int:
        """Records in one pass that `admit` lets through: `num_records`, less those whose caption the method refuses
        (what `--epochs` counts for a method that trains on some captions only); a bad record counts, as there."""
        total = self.num_records()
        if self.admit is None:
            return total
        return sum(1 for k in range(total) if _bad_caption(caption := self.caption_at(k)) or self.admit(caption.strip()))

    def caption_at(self, index: int) -> Any:
        """Record `index`'s caption alone: what `admitted_records` reads, with no image decoded."""
        return self.record_at(index)[2]

    def record_at(self, index: int) -> tuple[str, Any, Any, Any]:
        """Record `index` of the whole data (every process's part), as `records` yields it: what a partner is drawn from."""
        raise UsageError(f"{self.name}: webdataset shards are read in order, so a partner cannot be drawn from the whole data; "
                         "train on a CSV, captions JSON or .npy, or draw partners from the batch (CLIC: --method-opt partner=batch)")

    @property
    def random_access(self) -> bool:
        return type(self).record_at is not ImageTextReader.record_at

    def records(self) -> Iterator[tuple[str, Any, Any, Any]]:
        """Yield `(where, image, caption, concepts)` for this process's part (`self.shard()`, taken by `part_of`): image a
        path or bytes (None if absent), concepts the sample's own concept record as JSON bytes (`compclip concepts
        --into-shards`) or None."""
        raise NotImplementedError

    def shard(self) -> tuple[int, int]:
        return shard_position(self.worker_rotation)

    def __iter__(self) -> Iterator[Sample]:
        self.skips.reset()
        shard = self.shard()[0]
        skip = self.resume_positions.get(shard, 0)
        part_seed = ((self.sample_seed or 0) + self.epoch) * 1_000_003 + shard  # this epoch's part of the data
        records = self.records()
        if self.shuffle > 1:
            records = shuffled(records, self.shuffle, random.Random(part_seed))
        for pos, (where, image, caption, concepts) in enumerate(records):
            if pos < skip:
                continue
            if self.sample_seed is not None:  # the CPU generator alone: torch.manual_seed also queues lazy CUDA/XPU
                torch.default_generator.manual_seed((part_seed * 1_000_000_007 + pos) % SEED_SPAN)  # 0.14 ms a sample
            sample = self._make(where, image, caption, concepts)
            if sample is not None and self.partners:
                sample["partner"] = self._partner(sample, random.Random(part_seed * 1_000_000_009 + pos))
            if sample is not None:
                self.skips.ok()
                sample["shard"], sample["pos"] = shard, pos
                yield sample
        self.skips.log_pass_summary()
        self.start(self.epoch + 1)  # the next epoch from its beginning: persistent workers need no word between epochs

    def _partner(self, sample: Sample, rng: random.Random, tries: int = 50) -> Sample:
        """Another record of the whole data, drawn at random until it is a good sample of the same orientation (a
        transform's `portrait`), as the CLIC authors' `get_random_image_with_specific_ratio` draws; after `tries` draws,
        the last good one of any orientation. A bad record drawn is passed over, not counted as skipped."""
        total, found = self.num_records(), None
        for _ in range(tries):
            candidate = self._make(*self.record_at(rng.randrange(total)), skips=_UNCOUNTED)
            if candidate is None or candidate["key"] == sample["key"]:
                continue
            found = candidate
            if candidate.get("portrait") == sample.get("portrait"):
                break
        if found is None:
            raise DataError(f"{self.name}: {tries} records drawn as {sample['key']}'s partner, none of them a usable sample")
        return found

    def _make(self, where: str, image: Any, caption: Any, concepts: bytes | None = None, skips: Any = None) -> Sample | None:
        skips = self.skips if skips is None else skips
        reason = _bad_caption(caption)
        if reason:
            skips.skip(reason, where, repr(caption)[:80])
            return None
        if self.admit is not None and not self.admit(caption.strip()):
            skips.skip("not_admitted", where, repr(caption)[:80])
            return None
        record = None
        if concepts is not None:
            try:
                record = record_from_json(json.loads(concepts))
            except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as e:
                skips.skip("bad_record", where, f"concepts.json: {type(e).__name__}: {e}")
                return None
        if image is None:
            skips.skip("missing_image", where, "no image in record")
            return None
        try:
            if isinstance(image, np.ndarray):  # a decoded array: as it is to a transform that reads arrays (`BatchedView`)
                img = image if getattr(self.transform, "reads_arrays", False) else Image.fromarray(image)
            else:
                img = decode_image(image)
        except FileNotFoundError:
            skips.skip("missing_image", where, str(image))
            return None
        except ImageTooLarge as e:
            skips.skip("image_too_large", where, f"{'' if isinstance(image, bytes) else f'{image}: '}{e}")
            return None
        except (OSError, UnidentifiedImageError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
            name = "" if isinstance(image, bytes) else f"{image}: "
            skips.skip("corrupt_image", where, f"{name}{type(e).__name__}: {e}")
            return None
        view = self.transform(img) if self.transform else img
        fields = view if isinstance(view, dict) else {"image": view}  # a transform may give several views
        if record is not None:
            fields["concepts"] = record
        return {**fields, "caption": caption.strip(), "key": where}

    def stats(self) -> dict[str, int]:
        return self.skips.stats()

    def first_missing_image(self, limit: int = 10_000) -> tuple[str, Path] | None:
        """(record, path) of the first image file that is not there among the first `limit` records."""
        for where, image, _, _ in itertools.islice(self.records(), limit):
            if isinstance(image, Path) and not image.exists():
                return where, image
        return None


class CsvReader(ImageTextReader):
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
        self.sep = sep or ("\t" if self.path.suffix.lower() in (".tsv", ".tab") else ",")
        self.image_root = Path(image_root) if image_root else self.path.parent
        with self._open() as f:
            columns = next(csv.reader(f, delimiter=self.sep), [])
        missing = [k for k in (image_key, caption_key) if k not in columns]
        if missing:
            raise DataError(f"{self.path}: no column {missing} (columns: {columns}); set --image-key / --caption-key")

    def _open(self):
        return open_table(self.path)

    def num_records(self) -> int:
        return len(self._all_rows())

    def _rows_of(self) -> Iterator[tuple[str, Any, Any, str | None]]:
        """Every row as (where, image path or None, caption, None), or for a malformed row (where, None, None, what is
        wrong with it)."""
        for line, row, malformed in table_rows(self.path, self.sep):
            where = f"{self.path}:{line}"
            if malformed:
                yield where, None, None, malformed
            elif None in row or None in row.values():  # DictReader's marks of a long or short row
                fields = sum(v is not None for k, v in row.items() if k is not None) + len(row.get(None, []))
                yield where, None, None, f"{fields} fields, header has {len(row) - (None in row)}"
            else:
                rel = row[self.image_key].strip()
                yield where, image_path(self.image_root, rel) if rel else None, row[self.caption_key], None

    def _all_rows(self) -> list[tuple[str, Any, Any, str | None]]:
        """Every row, read once per process for `record_at` (a malformed one drawn is no usable sample)."""
        if getattr(self, "_rows", None) is None:
            self._rows = list(self._rows_of())
        return self._rows

    def record_at(self, index: int) -> tuple[str, Any, Any, Any]:
        return (*self._all_rows()[index][:3], None)

    def records(self):
        for where, image, caption, malformed in part_of(self._rows_of(), *self.shard()):
            if malformed:
                self.skips.skip("bad_record", where, malformed)
                continue
            yield where, image, caption, None


CONCEPTS_MEMBER = "concepts.json"


class _Watched:
    """A stream that remembers where its last byte that is not zero was: what follows a tar's last member must be zeros."""

    def __init__(self, raw):
        self.raw, self.pos, self.last_data = raw, 0, 0

    def read(self, size: int = -1) -> bytes:
        chunk = self.raw.read(size)
        kept = len(chunk.rstrip(b"\0"))
        if kept:
            self.last_data = self.pos + kept
        self.pos += len(chunk)
        return chunk


def tar_members(url: str, damaged: Callable[[str], None]) -> Iterator[tuple[tarfile.TarInfo, Callable[[], bytes | None]]]:
    """Each member of a tar shard with what reads its bytes (None for what is not a file), in order: read before the next
    member, and after a caller has done with the members before it (a shard cut off in this one's data fails there).

    What webdataset's `tar_file_iterator` (its `tariterators`) reads, on the same `tarfile.open(..., mode="r|*")` stream
    and `wds.gopen` (so any URL webdataset opens, `pipe:` included, opens here), with one difference that matters:
    Python's tarfile takes a damaged header for the archive's end and drops the rest of the shard in silence, so
    webdataset would train on part of a shard and say nothing. Here reading goes on past it (`ignore_zeros` finds the
    next good header), and `damaged` is told where bytes were passed over: the member whose header it was is lost, and
    the sample it belonged to lacks it. A shard cut off, in a member or between two, raises `tarfile.ReadError`."""
    import webdataset as wds

    end = 0  # where the previous member's data ended: the next header starts there
    with wds.gopen(url) as raw:
        stream = _Watched(raw)
        with tarfile.open(fileobj=stream, mode="r|*", ignore_zeros=True) as tar:
            for member in tar:
                if member.offset > end:
                    damaged(f"bytes {end}-{member.offset} are no tar member (a damaged header): one member lost before {member.name}")
                end = member.offset_data + -(-member.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
                yield member, lambda member=member: tar.extractfile(member).read() if member.isreg() else None
        if stream.last_data > end:
            damaged(f"bytes {end}-{stream.last_data} after the last good member are no tar member (a damaged header): "
                    "what was there is lost")
        elif stream.pos < end + 2 * tarfile.BLOCKSIZE:  # a whole archive ends in two zero blocks
            raise tarfile.ReadError(f"cut off after byte {stream.pos}: the archive's end is missing")


def sample_caption(sample: dict[str, Any], caption_field: str = "caption") -> Any:
    """A webdataset sample's caption: its `txt`, or its `json`'s caption field (None when absent; bytes that
    are not UTF-8 come back surrogate-escaped, for the reader to count). Raises JSONDecodeError on bad json."""
    raw = sample.get("txt", sample.get("json"))
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="surrogateescape")
    if "txt" in sample:
        return text
    meta = json.loads(text)
    return meta.get(caption_field) if isinstance(meta, dict) else None


class WebDatasetReader(ImageTextReader):
    """webdataset tar shards: an image (jpg/jpeg/png/webp/gif/tif/tiff/bmp) plus `txt`, or `json` with a caption field."""

    def __init__(self, urls: str | list[str], transform: Callable | None = None, caption_field: str = "caption", **stages: Any):
        import webdataset as wds

        self.urls = wds.shardlists.expand_urls(urls) if isinstance(urls, str) else list(urls)
        extra = f" (+{len(self.urls) - 1} shards)" if len(self.urls) > 1 else ""
        super().__init__(f"{self.urls[0]}{extra}", transform, **stages)
        self.caption_field = caption_field

    def _shard_samples(self, url: str) -> Iterator[dict[str, Any]]:
        """A shard's members grouped by key (webdataset's convention); a damaged header is one bad record, reading going on
        after it; a shard cut off ends in one bad record."""
        sample: dict[str, Any] = {}
        try:
            for member, read in tar_members(url, lambda where: self.skips.skip("bad_record", url, where)):
                if not member.isreg():
                    continue
                folder, _, base = member.name.rpartition("/")
                stem, _, ext = base.partition(".")
                key = f"{folder}/{stem}" if folder else stem
                if sample and sample["__key__"] != key:
                    yield sample
                    sample = {}
                sample["__key__"] = key
                sample[ext.lower()] = read()
        except (tarfile.TarError, OSError) as e:
            after = f" after key {sample['__key__']}" if sample else ""
            self.skips.skip("bad_record", f"{url}{after}", f"{type(e).__name__}: {e}")
            return
        if sample:
            yield sample

    def records(self):
        if self.resampled:
            yield from self._resampled_records()
            return
        part = self.shard()
        # Whole shards per process when there are enough; otherwise every process reads
        # every shard and keeps every count-th sample, so no process sits idle.
        if len(self.urls) >= part[1]:
            samples = ((url, sample) for url in part_of(self.urls, *part) for sample in self._shard_samples(url))
        else:
            samples = part_of(((url, sample) for url in self.urls for sample in self._shard_samples(url)), *part)
        for url, sample in samples:
            record = self._record(url, sample)
            if record is not None:
                yield record

    def _resampled_records(self):
        """open_clip's --dataset-resampled (webdataset's `ResampledShards`): this part draws shards with replacement from
        all of them, seeded by (seed, epoch, part), until it has its share of `resampled` samples an epoch."""
        index, count = self.shard()
        rng = random.Random(((self.sample_seed or 0) + self.epoch) * 1_000_003 + index)
        share, read, idle = -(-self.resampled // count), 0, 0
        while read < share:
            url = rng.choice(self.urls)
            before = read
            for sample in self._shard_samples(url):
                record = self._record(url, sample)
                if record is not None:
                    read += 1
                    yield record
                    if read == share:
                        return
            idle = idle + 1 if read == before else 0
            if idle > 10 * len(self.urls):  # every draw empty: nothing to resample
                return

    def _record(self, url: str, sample: dict[str, Any]) -> tuple[str, Any, Any, Any] | None:
        where = f"{url} key {sample['__key__']}"
        image = next((sample[e] for e in IMAGE_EXTS if e in sample), None)
        try:
            caption = sample_caption(sample, self.caption_field)
        except json.JSONDecodeError as e:
            self.skips.skip("bad_record", where, f"json: {e}")
            return None
        return where, image, caption, sample.get(CONCEPTS_MEMBER)

    def concept_fields(self) -> tuple[str, ...] | None:
        """The concept fields the shards carry (`compclip concepts --into-shards`), judged by the first sample; None if none."""
        first = next(iter(self._shard_samples(self.urls[0])), {})
        if CONCEPTS_MEMBER not in first:
            return None
        return tuple(k for k in json.loads(first[CONCEPTS_MEMBER]) if k != "caption")


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
            files = {im.get("id"): im.get("file_name") for im in data["images"] if isinstance(im, dict)}
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


class ArrayReader(ImageTextReader):
    """Decoded images in a `.npy` array (uint8, N × H × W × 3), read memory-mapped, and their captions: the
    `caption` field of each line of a JSONL beside it (default `scenes.jsonl`), line i for image i.

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
        caption_paths = [Path(captions)] if captions else [p.with_name("scenes.jsonl") for p in self.paths]
        self.images, self.captions = [], []
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
            captions_ = []
            with open(lines, encoding="utf-8", errors="surrogateescape") as f:
                for line in f:
                    try:
                        item = json.loads(line)
                    except json.JSONDecodeError:
                        item = None
                    captions_.append(item.get(caption_key) if isinstance(item, dict) else None)
            if len(captions_) != len(images):
                raise DataError(f"{lines}: {len(captions_)} captions for the {len(images)} images of {array}")
            self.images.append(images)
            self.captions.append(captions_)
        sizes = [len(c) for c in self.captions]
        # record k of source s sits at (k + 0.5) / size: sorted together, the sources interleave evenly
        at = np.concatenate([(np.arange(n) + 0.5) / n for n in sizes])
        self.order = np.stack([np.repeat(np.arange(len(sizes)), sizes), np.concatenate([np.arange(n) for n in sizes])], 1)[
            np.argsort(at, kind="stable")]

    def __getstate__(self) -> dict[str, Any]:  # a DataLoader worker maps the arrays again
        return {k: v for k, v in self.__dict__.items() if k != "images"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.images = [np.load(p, mmap_mode="r") for p in self.paths]

    def num_records(self) -> int:
        return len(self.order)

    def caption_at(self, index: int) -> Any:
        source, i = self.order[index].tolist()
        return self.captions[source][i]

    def record_at(self, index: int) -> tuple[str, Any, Any, Any]:
        source, i = self.order[index].tolist()
        return f"{self.paths[source]}[{i}]", np.asarray(self.images[source][i]), self.captions[source][i], None

    def records(self):
        for k in part_of(range(len(self.order)), *self.shard()):
            yield self.record_at(k)


class _Uncounted:
    """A skip counter that counts nothing: a partner drawn and passed over is no skipped sample."""

    @staticmethod
    def skip(*_: Any) -> None:
        pass


_UNCOUNTED = _Uncounted()


def is_tar_shards(path: str | os.PathLike) -> bool:
    """A `.tar` file or a brace pattern of them (`shards-{0000..0099}.tar`)."""
    text = str(path)
    return Path(text).suffix.lower() == ".tar" or (".tar" in text and "{" in text)


def is_image_array(path: str | os.PathLike) -> bool:
    """An array of decoded images (`.npy`), or several joined by `::` (`ArrayReader`)."""
    return str(path).lower().endswith(".npy")


def data_files(path: str | os.PathLike) -> dict[str, Any] | None:
    """What a run's data is, beyond its path: how many files the path names (shards expanded), their bytes, and a
    SHA-256 of their contents (of a file over `WHOLE_UP_TO`, its size, first and last MiB: hashing a corpus of shards
    at every start would cost more than the run's first steps). A resume compares it (a file rewritten, in place at the
    same size too, or shards added between runs); None for a path with a remote or piped shard."""
    text = str(path)
    if is_tar_shards(text):
        import webdataset as wds

        names = wds.shardlists.expand_urls(text)
    elif is_image_array(text):  # arrays joined by "::", each with its captions beside it
        names = [str(f) for a in text.split("::") for f in (Path(a), Path(a).with_name("scenes.jsonl"))]
    else:
        names = [text]
    if any("://" in name or name.startswith("pipe:") for name in names):
        return None
    present = [name for name in names if os.path.isfile(name)]
    digest = hashlib.sha256()
    for name in present:
        size = os.stat(name).st_size
        digest.update(f"{size}\n".encode())
        with open(name, "rb") as f:
            if size <= WHOLE_UP_TO:
                while chunk := f.read(1 << 22):
                    digest.update(chunk)
            else:
                digest.update(f.read(1 << 20))
                f.seek(size - (1 << 20))
                digest.update(f.read())
    return {"files": len(names), "bytes": sum(os.stat(name).st_size for name in present), "sha256": digest.hexdigest()}


WHOLE_UP_TO = 256 << 20  # a data file up to this size is hashed whole for `data_files` (a captions CSV, a world's array)
IMAGES_HASHED = 256  # image files of a CSV or captions JSON hashed whole for `image_files`


def image_files(reader: ImageTextReader) -> dict[str, Any]:
    """What `data_files` cannot see of a CSV or a captions JSON: the image files it names, which a resume compares too
    (images replaced under the same names, re-extracted at another size). A SHA-256 over `IMAGES_HASHED` of them, spread
    evenly through the records and each hashed whole (every image would cost a corpus' reading at each start); a
    missing one counts as missing. Empty where the images are inside the data files (shards, arrays)."""
    if not reader.random_access or is_image_array(reader.name):
        return {}
    total = reader.num_records()
    count = min(total, IMAGES_HASHED)
    picks = [k * total // count for k in range(count)]
    digest = hashlib.sha256()
    for k in picks:
        image = reader.record_at(k)[1]
        digest.update(f"{k}\n".encode())  # by position and contents: the same images by another path are the same data
        try:
            with open(image, "rb") as f:
                while chunk := f.read(1 << 22):
                    digest.update(chunk)
        except (OSError, TypeError):  # missing, unreadable, or no image named: the reader skips and counts it
            digest.update(b"\0missing\0")
    return {"images_hashed": len(picks), "images_sha256": digest.hexdigest()}


def open_reader(path: str | os.PathLike, transform: Callable | None = None, **kwargs) -> ImageTextReader:
    """Pick the reader from the path: `.tar` shards (brace patterns allowed), `.csv`/`.tsv`, a captions `.json`,
    or an image array `.npy`. `kwargs`: the format's own (columns, caption field, image root) and the stages'
    (`ImageTextReader`'s: sample_seed, shuffle, admit, partners, resampled)."""
    text = str(path)
    suffix = Path(text).suffix.lower()
    if is_tar_shards(text):
        return WebDatasetReader(text, transform, **kwargs)
    if suffix in (".csv", ".tsv", ".tab"):
        return CsvReader(text, transform, **kwargs)
    if suffix == ".json":
        return FolderReader(text, transform=transform, **kwargs)
    if is_image_array(text):
        return ArrayReader(text, transform, **kwargs)
    raise UsageError(f"{path}: unknown data format; expected .tar shards, .csv/.tsv, a captions .json or an image .npy")
