"""webdataset tar shards (open_clip's `--dataset-type webdataset`): an image plus `txt`, or `json` with a caption field;
brace patterns expand, and any URL webdataset opens (`pipe:` too) is read as a stream. The `json` may hold the data
fields a method declares (DAC's `dense_captions`), lists of texts, or a member of its own holds a text or an image, named
by the field's key (TripletCLIP's released shards: `KEY.neg_image`, an image, and `KEY.neg_caption`, a text, with `--field-key
negative_image=neg_image`); an image field is a member's."""
from __future__ import annotations

import json
import os
import random
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from torch.utils.data import get_worker_info

from ..readers import FORMATS, IMAGE_EXTS, DataFormat, ImageTextReader, field_kind, part_of


def is_tar_shards(path: str | os.PathLike) -> bool:
    """A `.tar` file or a brace pattern of them (`shards-{0000..0099}.tar`)."""
    text = str(path)
    return Path(text).suffix.lower() == ".tar" or (".tar" in text and "{" in text)


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


def sample_caption(sample: dict[str, Any], caption_key: str = "caption") -> Any:
    """A webdataset sample's caption: its `txt`, a member named as the caption key (TripletCLIP's released `.caption`), or
    its `json`'s caption field (None when absent; bytes that are not UTF-8 come back surrogate-escaped, for the reader to
    count). Raises JSONDecodeError on bad json."""
    member = next((m for m in ("txt", caption_key) if m in sample and m != "json"), None)
    raw = sample.get(member or "json")
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="surrogateescape")
    if member:
        return text
    meta = json.loads(text)
    return meta.get(caption_key) if isinstance(meta, dict) else None


def shard_urls(path: str) -> list[str]:
    """The shards a path names: brace patterns expanded, sources joined by "::" in turn (webdataset's own rule)."""
    import webdataset as wds

    return wds.shardlists.expand_urls(path)


class WebDatasetReader(ImageTextReader):
    """webdataset tar shards: an image (jpg/jpeg/png/webp/gif/tif/tiff/bmp, or `image` as TripletCLIP's released shards
    name it) plus `txt`, a member named as the caption key, or `json` with a caption field."""

    def __init__(self, urls: str | list[str], transform: Callable | None = None, caption_key: str = "caption", **stages: Any):
        self.urls = shard_urls(urls) if isinstance(urls, str) else list(urls)
        extra = f" (+{len(self.urls) - 1} shards)" if len(self.urls) > 1 else ""
        super().__init__(f"{self.urls[0]}{extra}", transform, **stages)
        self.caption_key = caption_key

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

    def samples_due(self) -> int | None:
        """Resampled, this part's share of `resampled` samples an epoch: whole batches, as many as open_clip gives a worker
        (`open_clip_train/data.py`, `get_wds_dataset`: `num_worker_batches = ceil(ceil(num_samples / global_batch_size) /
        workers)`, its `with_epoch`), less those of the batches it gave before a resume (the DataLoader takes a batch from
        each worker in turn)."""
        if not self.resampled:
            return None
        index, count = self.shard()
        share = -(-self.resampled // (count * self.batch_size)) * self.batch_size
        workers = getattr(get_worker_info(), "num_workers", 1)
        return share - self.batch_size * len(range(index % workers, self.resume_batches, workers))

    def _resampled_records(self):
        """open_clip's --dataset-resampled (webdataset's `ResampledShards`): this part draws shards with replacement from
        all of them, seeded by (seed, epoch, part), until its pass has yielded the samples due (`samples_due`, which ends
        it). Drawing stops sooner only where no draw makes a sample: more than 10 draws a shard in a row that gave no
        record, or whose records were all skipped (judged as later ones are drawn: a shuffle buffer reads ahead)."""
        if self.samples_due() <= 0:  # a resume at the epoch's end: nothing left to draw
            return
        index, _ = self.shard()
        rng = random.Random(((self.sample_seed or 0) + self.epoch) * 1_000_003 + index)
        idle = 0
        while idle <= 10 * len(self.urls):
            url, read, judged, drew = rng.choice(self.urls), self.skips.samples(), self.skips.judged(), False
            for sample in self._shard_samples(url):
                drew = True
                record = self._record(url, sample)
                if record is not None:
                    yield record
            idle = 0 if self.skips.samples() > read else idle + (self.skips.judged() > judged or not drew)

    def _record(self, url: str, sample: dict[str, Any]) -> tuple[str, Any, Any, Any] | None:
        where = f"{url} key {sample['__key__']}"
        image = next((sample[e] for e in (*IMAGE_EXTS, "image") if e in sample), None)  # TripletCLIP's shards: KEY.image
        try:
            caption = sample_caption(sample, self.caption_key)
            meta = json.loads(sample["json"]) if self.fields and "json" in sample else {}
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            self.skips.skip("bad_record", where, f"json: {e}")
            return None
        extra = {name: meta[key] for name, key in self.fields.items()
                 if isinstance(meta, dict) and key in meta and field_kind(name) != "image"}
        extra |= {name: self._member(name, sample[key.lower()]) for name, key in self.fields.items()
                  if key.lower() in sample and field_kind(name) not in ("texts", "fills")}
        if CONCEPTS_MEMBER in sample:
            extra["concepts"] = sample[CONCEPTS_MEMBER]
        return where, image, caption, extra or None

    @staticmethod
    def _member(name: str, data: bytes | None) -> Any:
        """A data field held as a member of its own (TripletCLIP's `.neg_image`, `.neg_caption`): an image's bytes as they
        are, a text decoded (bytes that are not UTF-8 surrogate-escaped, for the reader to count)."""
        if data is None or field_kind(name) == "image":
            return data
        return data.decode("utf-8", errors="surrogateescape")

    def concept_fields(self) -> tuple[str, ...] | None:
        """The concept fields the shards carry (`compclip concepts --into-shards`), judged by the first sample; None if none."""
        first = next(iter(self._shard_samples(self.urls[0])), {})
        if CONCEPTS_MEMBER not in first:
            return None
        return tuple(k for k in json.loads(first[CONCEPTS_MEMBER]) if k != "caption")


FORMATS.register("webdataset", DataFormat(
    "webdataset", ".tar shards (brace patterns expand)", is_tar_shards, WebDatasetReader, ("caption_key",),
    lambda path, caption_key: (caption for _, _, caption, _ in WebDatasetReader(path, caption_key=caption_key).records()),
    files=shard_urls, joins=True, streamed=True, fields=True,
    concept_fields=lambda path, caption_key: WebDatasetReader(path, caption_key=caption_key).concept_fields()))
