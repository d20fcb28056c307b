"""What every streaming image-text reader shares, and the registry of training-data formats (`FORMATS`, `DataFormat`):
each format (CSV/TSV, JSON lines, webdataset tar shards, an image folder with a captions JSON, decoded image arrays) is
one module of `data/formats/`, and `open_reader` picks it by the path.

Each reader is a torch IterableDataset yielding `{"image", "caption", "key"}` dicts. A reader is one record source per
format (`records`: this part's raw records, the part taken by `part_of`), then the same stages for all, in `__iter__`: shuffle,
resume, decode (with a per-sample seed), partner; webdataset shards may be resampled instead of read in order. The
stages are set by constructor arguments, the position a run resumes at by `start`. Bad records (missing or corrupt
images, empty or undecodable captions, malformed rows) are skipped and counted, never fatal; see `SkipCounter`.
"""
from __future__ import annotations

import hashlib
import io
import itertools
import json
import logging
import os
import random
import re
import stat
import warnings
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from PIL import Image, UnidentifiedImageError
from torch.utils.data import IterableDataset, get_worker_info

from ..errors import DataError, UsageError
from ..plugins import Registry
from .concept_records import record_from_json
from .lines import TextLines
from .skips import SkipCounter

log = logging.getLogger("compclip.data")

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


def decode_image(source: str | os.PathLike | bytes, colours: str = "viewer") -> Image.Image:
    """Fully decode an image (so truncated files fail here, not later) and convert to RGB by the rule `colours` names
    (`RGB_RULES`: compclip's viewer's, or PIL's as CLIP_benchmark reads its layouts). One larger than PIL's
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
        return RGB_RULES[colours](img)


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


def pil_rgb(img: Image.Image) -> Image.Image:
    """PIL's own `convert("RGB")`, as CLIP_benchmark reads the images of its layouts (torchvision's `default_loader`,
    webdataset's "pil" decoding, open_clip's `_convert_to_rgb`): the alpha channel dropped, so a transparent pixel shows
    the colour it hides, and 16-bit greys clipped at 255."""
    return img.convert("RGB")


# how an image becomes 8-bit RGB, by name: compclip's viewer's colours (`to_rgb`), or PIL's as CLIP_benchmark reads them
RGB_RULES: dict[str, Callable[[Image.Image], Image.Image]] = {"viewer": to_rgb, "clip_benchmark": pil_rgb}


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


def bad_texts(value: Any) -> str | None:
    """What is wrong with a data field of texts a method declares (`LossPart.sample_fields`: DAC's dense captions), or None:
    it must be a list of texts that are not empty, in UTF-8 (an empty list is a sample with none)."""
    if value is _ABSENT:
        return "absent"
    if not isinstance(value, list):
        return f"a {type(value).__name__}, not a list of texts"
    bad = next((t for t in value if not isinstance(t, str) or not t.strip() or undecodable(t)), None)
    return None if bad is None else f"holds {bad!r}, not a text"


def bad_fills(value: Any) -> str | None:
    """What is wrong with a data field of masked-LM fills (`llm_negatives`, `compclip negatives` writes it), or None: a
    list per masked word (an empty list: a caption with none) of a list per place the word stands of that place's fills
    (`bad_texts`; a place whose fills were all the word itself has none)."""
    if value is _ABSENT:
        return "absent"
    if not isinstance(value, list):
        return f"a {type(value).__name__}, not a list per masked word"
    for word in value:
        if not isinstance(word, list) or not word:
            return f"holds {word!r}, not a word's list of places"
        bad = next((reason for reason in map(bad_texts, word) if reason), None)
        if bad:
            return f"a place of a word: {bad}"
    return None


def refuse_flat_fills(value: Any, where: str, key: str) -> None:
    """Fills in one flat list of texts, as `compclip negatives` wrote them before it kept each word's apart, refused in one
    line naming the record: drawn among as they are, a word with more fills would come more often than the releases draw
    it (a word, then a place, then a fill), and which fills belong to which word is no longer there to read."""
    if isinstance(value, list) and value and all(isinstance(t, str) for t in value):
        raise DataError(f"{where}: field {key!r} holds its fills as one flat list of texts, as an older compclip negatives wrote "
                        "them; the releases draw a masked word, then one of its fills, which needs them per word: write them "
                        "again (compclip negatives DATA --what llm --out OUT)")


def bad_text(value: Any) -> str | None:
    """What is wrong with a data field of one text (TripletCLIP's negative caption), or None: a text, not empty, in UTF-8."""
    if value is _ABSENT:
        return "absent"
    if not isinstance(value, str) or undecodable(value) or not value.strip():
        return f"{value!r} is not a text"
    return None


def bad_records(value: Any) -> str | None:
    """What is wrong with a data field of record indices (NegCLIP's nearest neighbours), or None: a list of one or more
    integers (whether each names a record of the data is the reader's to judge, `ImageTextReader._neighbour`)."""
    if value is _ABSENT:
        return "absent"
    if not isinstance(value, list) or not value:
        return f"{value!r} is not a list of record indices"
    bad = next((i for i in value if not isinstance(i, int) or isinstance(i, bool)), None)
    return None if bad is None else f"holds {bad!r}, not a record index"


def neighbour_outside(where: str, key: str, index: int, data: str, total: int) -> str:
    """The line for record `where`, whose field `key` names record `index` of `data`'s `total`: no record of it."""
    return (f"{where}: field {key!r} holds record index {index}, and {data} has {total:,} records (indices 0 to {total - 1}): "
            "its neighbours were computed for other data")


_ABSENT = object()  # a declared field the record does not have

# What each data field a method may declare holds (`LossPart.sample_fields`), by its name: a list of texts (DAC's dense
# captions, any name not listed), masked-LM fills per word and place (SVLC-R+L's and DAC's, `bad_fills`), one text, one
# image, which the reader decodes and views as the sample's own image (TripletCLIP's negative image, CoN-CLIP's
# distractor: a path in JSON lines, a member or the json's path in a shard, a row of an array), or record indices of
# the same data (NegCLIP's nearest neighbours: the reader draws one and gives its image and caption as the sample's
# `negative_image` and `negative_caption`, `ImageTextReader._neighbour`)
FIELD_KINDS = {"negative_caption": "text", "negative_image": "image", "negated_caption": "text", "distractor_image": "image",
               "neighbours": "records", "llm_negatives": "fills"}
NEIGHBOUR_FIELDS = ("negative_image", "negative_caption")  # what a drawn neighbour gives its sample: its image, its caption


def field_kind(name: str) -> str:
    """"texts", "fills", "text", "image" or "records": what the data field `name` holds (`FIELD_KINDS`)."""
    return FIELD_KINDS.get(name, "texts")


def image_fields(declared: Iterable[str]) -> tuple[str, ...]:
    """The images a sample carries beside its own, for the data fields `declared`: each image field, and a drawn
    neighbour's (`NEIGHBOUR_FIELDS`) where a field of record indices is declared."""
    kinds = {name: field_kind(name) for name in declared}
    return tuple(dict.fromkeys([*(n for n, k in kinds.items() if k == "image"),
                                *(NEIGHBOUR_FIELDS[:1] if "records" in kinds.values() else ())]))


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


def epoch_order(count: int, seed: int, epoch: int, index: int, parts: int) -> np.ndarray:
    """Part `index` of `parts` (`shard_position`'s: a DDP rank's DataLoader worker) of one permutation of a whole file's
    `count` records, drawn from (seed, epoch) alone: every rank and worker draws the same one and takes every `parts`-th
    index of it from its own on, so the parts are disjoint and together the whole file, as DistributedSampler shares
    one permutation among ranks. 8 bytes a record (an int64 index each), in every process that reads."""
    return np.random.default_rng([seed % SEED_SPAN, epoch]).permutation(count)[index::parts]


class ImageTextReader(IterableDataset):
    """Shared machinery: sharding, decoding, skip accounting. Subclasses list raw records.

    Samples carry `shard` (this process's part of the data) and `pos` (the record's index in
    that part), so a trainer can record how far each part was consumed and resume there (`start`).

    - `sample_seed`: each sample's random augmentation is seeded from (seed + epoch, shard, pos), so it does not
      depend on where a run started.
    - `shuffle` > 1: a file read at random (`record_at`: a CSV, JSON lines, captions JSON, arrays) is shuffled whole
      each epoch, by an index permutation seeded from (seed, epoch) that every part shares (`epoch_order`), as
      open_clip's CsvDataset is drawn: a file of five captions a photo in a row puts no more siblings into a batch than
      chance does. A stream's records (shards) pass through a shuffle buffer of that many (webdataset's kind, as
      open_clip uses), seeded from (seed, epoch, shard). Positions count the shuffled order, so resuming stays exact.
    - `admit`: a caption it refuses is skipped (and counted) before its image is decoded (a method that trains on
      some captions only, a keyword's subset).
    - `partners`: each sample also carries a `partner` drawn from the whole data (`record_at`; refused here for a
      reader that cannot draw one).
    - `fields`: the data fields a method declares (`LossPart.sample_fields`), each by the record's key that holds it
      (name: key): every sample carries each one under its name, a record whose value is not what its kind holds
      (`field_kind`: a list of texts, a text) is a bad record, and an image field is decoded and viewed as the image is
      (a missing or corrupt one skips its sample, counted as the image's would be); only a format whose
      `DataFormat.fields` says so takes any (`open_reader` refuses the others).
    - `resampled` (webdataset shards): samples an epoch (yielded: a skipped record is none), drawn with replacement (0:
      each shard once, in order), each part's share rounded up to whole batches of `batch_size` (the DataLoader's, which
      drops a worker's last partial batch), as open_clip gives each worker `ceil(batches / workers)`: an epoch is never
      short of its batches.

    Each pass ends by moving the reader to the next epoch (resume positions and rotation
    cleared), so persistent DataLoader workers, which keep their own copy, need no word from
    the main process between epochs.
    """

    def __init__(self, name: str, transform: Callable | None = None, *, sample_seed: int | None = None, shuffle: int = 0,
                 admit: Callable[[str], bool] | None = None, partners: bool = False, resampled: int = 0, batch_size: int = 1,
                 fields: dict[str, str] | None = None):
        super().__init__()
        self.fields = dict(fields or {})
        self.name, self.transform = name, transform
        self.skips = SkipCounter(name)
        self.sample_seed, self.shuffle, self.admit, self.partners, self.resampled = sample_seed, shuffle, admit, partners, resampled
        self.batch_size = batch_size
        self.start()

    def start(self, epoch: int = 0, positions: dict[int, int] | None = None, rotation: int = 0, batches: int = 0) -> None:
        """Where the next pass begins: its epoch, each shard's records to skip undecoded, which DataLoader worker takes
        the first batch (`rotation`, so the batches after a resume come in the order they would have), and how many
        batches of the epoch were trained on before (what a resampled part has given of its share, `samples_due`)."""
        self.epoch, self.resume_positions, self.worker_rotation = epoch, dict(positions or {}), rotation
        self.resume_batches = batches

    def check_partners(self) -> None:
        """Partners and neighbours are drawn from the whole data: a reader that cannot reach any record says so now, not
        in a worker."""
        if (self.partners or "records" in map(field_kind, self.fields)) and not self.random_access:
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
        return sum(1 for caption in self.all_captions() if _bad_caption(caption) or self.admit(caption.strip()))

    def all_captions(self) -> Iterator[Any]:
        """Every record's caption, in record order."""
        return (self.caption_at(k) for k in range(self.num_records()))

    def caption_at(self, index: int) -> Any:
        """Record `index`'s caption alone: what `admitted_records` reads, with no image decoded."""
        return self.record_at(index)[2]

    def record_at(self, index: int) -> tuple[str, Any, Any, Any]:
        """Record `index` of the whole data (every process's part), as `records` yields it: what a partner is drawn from."""
        key = next((k for n, k in self.fields.items() if field_kind(n) == "records"), None)
        if key is not None:
            raise UsageError(f"{self.name}: webdataset shards are read in order, so a neighbour (a record index of {key!r}) "
                             "cannot be drawn from the whole data; train on JSON lines or a .npy")
        raise UsageError(f"{self.name}: webdataset shards are read in order, so a partner cannot be drawn from the whole data; "
                         "train on a CSV, captions JSON or .npy, or draw partners from the batch (CLIC: --method-opt partner=batch)")

    @property
    def random_access(self) -> bool:
        return type(self).record_at is not ImageTextReader.record_at

    def records(self) -> Iterator[tuple[str, Any, Any, Any]]:
        """Yield `(where, image, caption, extra)` for this process's part (`self.shard()`, taken by `part_of`): image a
        path or bytes (None if absent), extra None or what the record holds beside them, a dict: `concepts`, the sample's
        own concept record as JSON bytes (`compclip concepts --into-shards`), and each of `fields` by its name."""
        raise NotImplementedError

    def shard(self) -> tuple[int, int]:
        return shard_position(self.worker_rotation)

    def __iter__(self) -> Iterator[Sample]:
        self.skips.reset()
        shard = self.shard()[0]
        skip = self.resume_positions.get(shard, 0)
        part_seed = ((self.sample_seed or 0) + self.epoch) * 1_000_003 + shard  # this epoch's part of the data
        due = self.samples_due()
        for pos, (where, image, caption, extra) in self._numbered(part_seed, skip):
            if self.sample_seed is not None:  # the CPU generator alone: torch.manual_seed also queues lazy CUDA/XPU
                torch.default_generator.manual_seed((part_seed * 1_000_000_007 + pos) % SEED_SPAN)  # 0.14 ms a sample
            sample = self._make(where, image, caption, extra)
            if sample is not None and "neighbours" in sample:
                sample = self._neighbour(sample, random.Random(part_seed * 1_000_000_011 + pos))
            if sample is not None and self.partners:
                sample["partner"] = self._partner(sample, random.Random(part_seed * 1_000_000_009 + pos))
            if sample is not None:
                self.skips.ok()
                sample["shard"], sample["pos"] = shard, pos
                yield sample
                if due is not None and self.skips.samples() == due:
                    break
        self.skips.log_pass_summary()
        self.start(self.epoch + 1)  # the next epoch from its beginning: persistent workers need no word between epochs

    def samples_due(self) -> int | None:
        """How many samples this pass of this part yields at most (None: one for each good record). Resampled shards draw
        without end, so their pass ends here, when it has yielded its share: samples, not records, as open_clip's
        `with_epoch` counts a worker's batches of them, so that skipped records leave an epoch no shorter."""
        return None

    def _numbered(self, part_seed: int, skip: int) -> Iterator[tuple[int, tuple[str, Any, Any, Any]]]:
        """(position, record) of this pass's records from position `skip` on. A file read at random (`record_at`) and
        shuffled: its part of the epoch's permutation of the whole file (`epoch_order`), as open_clip's CsvDataset draws
        from the whole file, positions counting the part's indices (a resume skips them unread); a stream (shards):
        through the shuffle buffer, seeded by the part, as webdataset reads."""
        if self.shuffle > 1 and self.random_access:
            order = epoch_order(self.num_records(), self.sample_seed or 0, self.epoch, *self.shard())
            return self.records_in(order, skip)
        records = self.records()
        if self.shuffle > 1:
            records = shuffled(records, self.shuffle, random.Random(part_seed))
        return itertools.islice(enumerate(records), skip, None)

    def records_in(self, order: np.ndarray, first: int = 0) -> Iterator[tuple[int, tuple[str, Any, Any, Any]]]:
        """(position, record) of the records `order` names (indices into the whole data), from position `first` on."""
        for pos in range(first, len(order)):
            yield pos, self.record_at(int(order[pos]))

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

    def _neighbour(self, sample: Sample, rng: random.Random) -> Sample | None:
        """`sample` with one of its `neighbours` (record indices of the whole data, `record_at`'s), drawn by `rng` as
        NegCLIP's released `CsvDataset.__getitem__` draws one (`random.choice(self.hard_images[idx])`), giving its image
        viewed as the sample's is and its caption as the sample's `negative_image` and `negative_caption`. A neighbour
        whose record is no usable sample (its image missing or corrupt, its caption empty) skips the sample, counted
        under the neighbour's reason and named by both records; an index outside the data is an error naming the file,
        the record and both numbers: the neighbours were computed for other data."""
        neighbours, total = sample.pop("neighbours"), self.num_records()
        index = rng.choice(neighbours)
        if not 0 <= index < total:
            raise DataError(neighbour_outside(sample["key"], self.fields["neighbours"], index, self.name, total))
        where, image, caption, extra = self.record_at(index)
        found = self._make(where, image, caption, extra, _Relabelled(self.skips, sample["key"], f"field {self.fields['neighbours']!r}: "))
        if found is None:
            return None
        view = {k: v for k, v in found.items() if k not in ("caption", "key", "concepts", *self.fields)}  # its image's view
        return {**sample, **{NEIGHBOUR_FIELDS[0] if k == "image" else f"{NEIGHBOUR_FIELDS[0]}_{k}": v for k, v in view.items()},
                NEIGHBOUR_FIELDS[1]: found["caption"]}

    def _make(self, where: str, image: Any, caption: Any, extra: dict[str, Any] | None = None, skips: Any = None) -> Sample | None:
        skips = self.skips if skips is None else skips
        reason = _bad_caption(caption)
        if reason:
            skips.skip(reason, where, repr(caption)[:80])
            return None
        if self.admit is not None and not self.admit(caption.strip()):
            skips.skip("not_admitted", where, repr(caption)[:80])
            return None
        extra = extra or {}
        declared = {name: extra.get(name, _ABSENT) for name in self.fields}
        for name, value in declared.items():
            kind = field_kind(name)
            if kind == "fills":
                refuse_flat_fills(value, where, self.fields[name])
            judge = {"text": bad_text, "records": bad_records, "fills": bad_fills}.get(kind, bad_texts)
            reason = None if kind == "image" and value is not _ABSENT else judge(value)
            if reason:
                skips.skip("bad_record", where, f"field {self.fields[name]!r}: {reason}")
                return None
        record, concepts = None, extra.get("concepts")
        if concepts is not None:
            try:
                record = record_from_json(json.loads(concepts))
            except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as e:
                skips.skip("bad_record", where, f"concepts.json: {type(e).__name__}: {e}")
                return None
        img = self._decode(image, where, skips)
        if img is None:
            return None
        images = {name: value for name, value in declared.items() if field_kind(name) == "image"}
        for name, value in images.items():  # decoded before any view is drawn: a skipped one draws nothing
            images[name] = self._decode(value, where, skips, f"field {self.fields[name]!r}: ")
            if images[name] is None:
                return None
        fields = self._view(img, "image")
        for name, decoded in images.items():  # viewed as the image is, each after it from the sample's seeded generator
            fields.update(self._view(decoded, name))
        if record is not None:
            fields["concepts"] = record
        strip = {"text": str.strip, "records": list, "fills": lambda v: [[[t.strip() for t in place] for place in word] for word in v]}
        fields.update({name: strip.get(field_kind(name), lambda v: [t.strip() for t in v])(value)
                       for name, value in declared.items() if field_kind(name) != "image"})
        return {**fields, "caption": caption.strip(), "key": where}

    def _decode(self, image: Any, where: str, skips: Any, what: str = "") -> Any:
        """A record's image (or an image field's, `what` naming it) decoded for the transform, or None where it is
        skipped and counted: absent, missing, too large or corrupt."""
        if image is None:
            skips.skip("missing_image", where, f"{what}no image in record")
            return None
        try:
            if isinstance(image, np.ndarray):  # a decoded array: as it is to a transform that reads arrays (`BatchedView`)
                return image if getattr(self.transform, "reads_arrays", False) else Image.fromarray(image)
            if not isinstance(image, (bytes, str, os.PathLike)):
                raise ValueError(f"{image!r} is no image path")
            return decode_image(image)
        except FileNotFoundError:
            skips.skip("missing_image", where, f"{what}{image}")
        except ImageTooLarge as e:
            skips.skip("image_too_large", where, f"{what}{'' if isinstance(image, bytes) else f'{image}: '}{e}")
        except (OSError, UnidentifiedImageError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
            name = "" if isinstance(image, bytes) else f"{image}: "
            skips.skip("corrupt_image", where, f"{what}{name}{type(e).__name__}: {e}")
        return None

    def _view(self, img: Any, name: str) -> dict[str, Any]:
        """The transform's view of `img` under `name`; a transform that gives several (a dict: `BatchedView`'s pixels and
        crop box) gives each under `name`'s own key (its image) or `name_KEY`."""
        view = self.transform(img) if self.transform else img
        if not isinstance(view, dict):
            return {name: view}
        if name == "image":
            return view
        return {name if key == "image" else f"{name}_{key}": value for key, value in view.items()}

    def stats(self) -> dict[str, int]:
        return self.skips.stats()

    def first_missing_image(self, limit: int = 10_000) -> tuple[str, Path] | None:
        """(record, path) of the first image file that is not there among the first `limit` records: its image's, or an
        image field's (TripletCLIP's negative image)."""
        for where, image, _, extra in itertools.islice(self.records(), limit):
            for path in (image, *self.field_images(extra)):
                if isinstance(path, Path) and not path.exists():
                    return where, path
        return None

    def field_images(self, extra: dict[str, Any] | None) -> list[Any]:
        """The image fields' values of a record's `extra` (paths of JSON lines, a shard's bytes, an array's rows)."""
        return [extra[name] for name in self.fields if field_kind(name) == "image" and name in (extra or {})]


class TableReader(ImageTextReader):
    """A file of records a row each (a CSV, JSON lines): subclasses give `_rows_of`, every row as (where, image path or
    None, caption, None), or for a malformed row (where, None, None, what is wrong with it); a format that holds `fields`
    gives a fifth, the record's fields by name (`records`' extra). Its rows are held in memory
    for `record_at` and the shuffled order once either reads one (`TextTableReader` holds where each starts instead)."""

    def _rows_of(self) -> Iterator[tuple[str, Any, Any, str | None]]:
        raise NotImplementedError

    def num_records(self) -> int:
        return len(self._all_rows())

    def _all_rows(self) -> list[tuple[str, Any, Any, str | None]]:
        """Every row, read once per process for `record_at` (a malformed one drawn is no usable sample)."""
        if getattr(self, "_rows", None) is None:
            self._rows = list(self._rows_of())
        return self._rows

    def _row_at(self, index: int) -> tuple[str, Any, Any, str | None]:
        return self._all_rows()[index]

    def record_at(self, index: int) -> tuple[str, Any, Any, Any]:
        row = self._row_at(index)
        return (*row[:3], row[4] if len(row) > 4 else None)

    def records(self):
        for where, image, caption, malformed, *extra in part_of(self._rows_of(), *self.shard()):
            if malformed:
                self.skips.skip("bad_record", where, malformed)
                continue
            yield where, image, caption, extra[0] if extra else None

    def records_in(self, order: np.ndarray, first: int = 0) -> Iterator[tuple[int, tuple[str, Any, Any, Any]]]:
        for pos in range(first, len(order)):
            where, image, caption, malformed, *extra = self._row_at(int(order[pos]))
            if malformed:
                self.skips.skip("bad_record", where, malformed)
                continue
            yield pos, (where, image, caption, extra[0] if extra else None)


class TextTableReader(TableReader):
    """A table in a text file (CSV, JSON lines), whose rows are read at random by seeking to where each starts: what it
    holds of the file is that index (`_starts`: byte offset and line number, 16 bytes a row), found once per process,
    so a file of millions of rows shuffles whole in constant memory a row. `_rows_of(at)` reads from a row's start."""

    def _rows_of(self, at: tuple[int, int] | None = None) -> Iterator[tuple[str, Any, Any, str | None]]:
        raise NotImplementedError

    def _starts(self) -> np.ndarray:
        raise NotImplementedError

    def num_records(self) -> int:
        return len(self._index())

    def _index(self) -> np.ndarray:
        if getattr(self, "_row_starts", None) is None:
            self._row_starts = self._starts()
        return self._row_starts

    def _row_at(self, index: int) -> tuple[str, Any, Any, str | None]:
        at, line = self._index()[index].tolist()
        return next(self._rows_of((at, line)))

    def all_captions(self) -> Iterator[Any]:
        return (caption for _, _, caption, *_ in self._rows_of())


class _Relabelled:
    """A skip counter that counts a drawn neighbour's fault as its sample's: under the neighbour's reason, named by the
    sample's record, then the field and the neighbour's own record."""

    def __init__(self, skips: Any, where: str, what: str):
        self.skips, self.where, self.what = skips, where, what

    def skip(self, reason: str, where: str, detail: str = "") -> None:
        self.skips.skip(reason, self.where, f"{self.what}{where}: {detail}")


class _Uncounted:
    """A skip counter that counts nothing: a partner drawn and passed over is no skipped sample."""

    @staticmethod
    def skip(*_: Any) -> None:
        pass


_UNCOUNTED = _Uncounted()


def data_files(path: str | os.PathLike) -> dict[str, Any] | None:
    """What a run's data is, beyond its path: how many files the path names (shards expanded), their bytes, and a
    SHA-256 of their contents (of a file over `WHOLE_UP_TO`, its size, first and last MiB: hashing a corpus of shards
    at every start would cost more than the run's first steps). A resume compares it (a file rewritten, in place at the
    same size too, or shards added between runs); None for a path with a remote or piped shard."""
    names = data_format(path).files(str(path))
    if any("://" in name or name.startswith("pipe:") for name in names):
        return None
    present = [name for name in names if os.path.isfile(name)]
    digest = hashlib.sha256()
    for name in present:
        size = os.stat(name).st_size
        digest.update(f"{size}\n".encode())
        with open(name, "rb") as f:
            _hash_contents(digest, f, size, WHOLE_UP_TO)
    return {"files": len(names), "bytes": sum(os.stat(name).st_size for name in present), "sha256": digest.hexdigest()}


WHOLE_UP_TO = 256 << 20  # a data file up to this size is hashed whole for `data_files` (a captions CSV, a world's array)
IMAGES_HASHED = 256  # image files of a CSV or captions JSON hashed for `image_files`
IMAGE_WHOLE_UP_TO = 16 << 20  # an image file up to this size is hashed whole for `image_files`


def _hash_contents(digest: Any, f: Any, size: int, whole_up_to: int) -> None:
    """The open file `f`'s `size` bytes (its size as stat gave it) into `digest`: all of them up to `whole_up_to`, else
    the first and last MiB. Never more than `size`, so a file written to while it is hashed still ends."""
    if size > whole_up_to:
        digest.update(f.read(1 << 20))
        f.seek(size - (1 << 20))
        digest.update(f.read(1 << 20))
        return
    while size > 0 and (chunk := f.read(min(size, 1 << 22))):
        digest.update(chunk)
        size -= len(chunk)


def _hash_image(digest: Any, image: Any) -> str | None:
    """An image file's contents into `digest` (bounded by `IMAGE_WHOLE_UP_TO`), or a mark where there are none to read
    (missing, unreadable, no image named: the reader skips and counts that sample). A file that is not regular (a FIFO, a
    device, a folder) is marked alike and never opened, and its kind returned: opening a FIFO waits for a writer, and a
    link to /dev/zero reads without end."""
    try:
        found = os.stat(image)
        if stat.S_ISREG(found.st_mode):
            with open(image, "rb") as f:
                _hash_contents(digest, f, found.st_size, IMAGE_WHOLE_UP_TO)
            return None
    except (OSError, TypeError, ValueError):
        digest.update(b"\0missing\0")
        return None
    digest.update(b"\0missing\0")
    return _KINDS.get(stat.S_IFMT(found.st_mode), "a special file")


def image_files(reader: ImageTextReader) -> dict[str, Any]:
    """What `data_files` cannot see of a CSV, JSON lines or a captions JSON: the image files it names (a record's image
    and its image fields', TripletCLIP's negative image), which a resume compares too (images replaced under the same
    names, re-extracted at another size). A SHA-256 over the images of `IMAGES_HASHED` records, spread evenly through
    them, each hashed whole (of one over `IMAGE_WHOLE_UP_TO`, its first and last MiB: every image
    would cost a corpus' reading at each start); a missing one counts as missing, and so does one that is no regular
    file, unopened (`_hash_image`), which a warning names: training skips its sample. Empty where the images are inside
    the data files (shards, arrays)."""
    if not reader.random_access or data_format(reader.name).decoded:
        return {}
    total = reader.num_records()
    count = min(total, IMAGES_HASHED)
    picks = [k * total // count for k in range(count)]
    digest, special = hashlib.sha256(), []
    for k in picks:
        where, image, _, extra = reader.record_at(k)
        digest.update(f"{k}\n".encode())  # by position and contents: the same images by another path are the same data
        for path in (image, *reader.field_images(extra)):  # its own, then its image fields' (TripletCLIP's negative image)
            kind = _hash_image(digest, path)
            if kind:
                special.append(f"{where} ({path}: not a regular file ({kind}))")
    if special:
        more = f" and {len(special) - 3} more" if len(special) > 3 else ""
        log.warning("%s: not read for a resume's check, and skipped in training as corrupt images: %s%s", reader.name,
                    "; ".join(special[:3]), more)
    return {"images_hashed": len(picks), "images_sha256": digest.hexdigest()}


@dataclass(frozen=True)
class DataFormat:
    """One training-data format, declared once in its own module of `data/formats/` (`FORMATS.register`): which paths
    it reads, its reader, and what training and `compclip concepts` ask of it.

    - `describe`: what a user hands it, as the refusal of a path no format reads lists it;
    - `matches(path)`: whether a path is this format's;
    - `reader(path, transform=..., **options, **stages)`: an `ImageTextReader`;
    - `options`: which of the run's `image_key`, `caption_key` and `image_root` the reader takes;
    - `captions(path, caption_key)`: the captions alone, in record order, for `compclip concepts` (None for a record
      that has none); `count(path)`: how many, or None where only reading says;
    - `files(path)`: the files the path names, which a resume hashes (`data_files`) and a run looks for before it starts;
    - `joins`: several sources joined by "::" (open_clip's way of naming them) are read as one;
    - `streamed`: read as a stream of shards from any URL webdataset opens: nothing is looked for before reading (a
      shard that cannot be read is a bad record), the count of records is unknown, and `--dataset-resampled` may draw
      the shards with replacement;
    - `decoded`: its images arrive decoded (arrays), for a transform that takes a batch of them (`BatchedView`);
    - `concept_fields(path, caption_key)`: the concept fields its samples carry themselves, or None;
    - `fields`: its records can hold the data fields a method declares (texts and images: JSON lines, shards, an array's
      scenes), read by its reader's `fields` (`open_reader` refuses them to the others).
    """

    name: str
    describe: str
    matches: Callable[[str], bool]
    reader: Callable[..., ImageTextReader]
    options: tuple[str, ...]
    captions: Callable[[str, str], Iterator[Any]]
    count: Callable[[str], int | None] = lambda path: None
    files: Callable[[str], list[str]] = lambda path: [path]
    joins: bool = False
    streamed: bool = False
    decoded: bool = False
    concept_fields: Callable[[str, str], tuple[str, ...] | None] = lambda path, caption_key: None
    fields: bool = False

    def missing_file(self, path: str) -> str | None:
        """The first file `path` names that is not there (None for a streamed format, whose shards are read as met)."""
        return None if self.streamed else next((name for name in self.files(path) if not os.path.isfile(name)), None)


FORMATS: Registry[DataFormat] = Registry("data format", f"{__package__}.formats", "compclip.data_formats")


def data_format(path: str | os.PathLike) -> DataFormat:
    """The format that reads `path`, or a UsageError listing what each format reads (or, for sources joined by "::",
    which formats read them as one)."""
    text = str(path)
    found = next((f for f in FORMATS.values() if f.matches(text)), None)
    if found is None:
        raise UsageError(f"{path}: unknown data format; expected {', '.join(f.describe for f in FORMATS.values())}")
    if "::" in text and not found.joins:
        joining = ", ".join(f.describe for f in FORMATS.values() if f.joins)
        raise UsageError(f"{path}: several {found.name} sources joined by '::' are not read as one (only {joining} are); "
                         "write them into one file")
    return found


def open_reader(path: str | os.PathLike, transform: Callable | None = None, **kwargs) -> ImageTextReader:
    """The reader of `path`'s format (`data_format`). `kwargs`: the format's own (its `options`: columns, caption key,
    image root) and the stages' (`ImageTextReader`'s: sample_seed, shuffle, admit, partners, resampled, batch_size,
    fields). Data fields (`fields`) from a format that cannot hold them are refused, naming them and where they can be."""
    found = data_format(path)
    if kwargs.get("fields") and not found.fields:
        name, key = next(iter(kwargs["fields"].items()))
        kind = field_kind(name)
        held = {"texts": ("a list of texts", "list", "[...]", ", or webdataset shards whose .json holds it"),
                "fills": ("fills per masked word and place", "list", "[[[...]]]", ", or webdataset shards whose .json holds it"),
                "text": ("a text", "text", '"..."', f", or webdataset shards with a .{key} member or a .json that holds it"),
                "image": ("an image", "image path", '"....jpg"', f", or webdataset shards with a .{key} image member"),
                # shards are read in order: no record of the whole data can be drawn
                "records": ("record indices of the same data", "list of record indices", "[3, 17, 42]", "")}[kind]
        raise UsageError(f"{path}: the method reads a field {name!r} per sample ({held[0]}), which {found.describe} cannot "
                         f"hold: write the data as JSON lines with a {key!r} {held[1]} in each record ({{\"image\": ..., "
                         f"\"caption\": ..., \"{key}\": {held[2]}}}){held[3]}")
    return found.reader(str(path), transform=transform, **kwargs)


def reader_options(path: str | os.PathLike, **given: Any) -> dict[str, Any]:
    """Of a run's `image_key`, `caption_key` and `image_root`, what the reader of `path`'s format takes."""
    return {key: given[key] for key in data_format(path).options}


def utf8_captions(rows: Iterable[tuple[str, Any]]) -> Iterator[Any]:
    """Each (where, caption)'s caption, one whose bytes are not UTF-8 as None (an empty record), as training skips
    it; the first such one is named in a warning, the rest counted there."""
    seen = 0
    for where, caption in rows:
        if isinstance(caption, str) and undecodable(caption):
            seen += 1
            if seen == 1:
                log.warning("%s: skipped a caption whose bytes are not UTF-8, as training skips it (more are counted, not named)",
                            where)
            caption = None
        yield caption


def json_lines(path: Path, at: tuple[int, int] | None = None) -> Iterator[tuple[str, Any]]:
    """(where, the line's JSON value, or the JSONDecodeError of a line that is none) of each line that is not blank; bytes
    that are not UTF-8 come back surrogate-escaped, for the reader to count. From `at` on when given (a line's byte
    offset and number, as `json_line_starts` keeps them)."""
    with TextLines(path, at[0] if at else 0) as lines:
        for number, line in enumerate(lines, at[1] if at else 1):
            if line.strip():
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as e:
                    value = e
                yield f"{path}:{number}", value


def json_line_starts(path: Path) -> np.ndarray:
    """Where each line of `json_lines` starts: an (N, 2) int64 array of its byte offset and line number, 16 bytes a line."""
    starts = array("q")  # 16 bytes a line while it is found too, where a list of pairs took 120
    with TextLines(path) as lines:
        at = lines.at
        for number, line in enumerate(lines, 1):
            if line.strip():
                starts.extend((at, number))
            at = lines.at
    return np.frombuffer(starts, dtype=np.int64).reshape(-1, 2)
