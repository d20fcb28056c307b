"""CLIP_benchmark's WebDataset retrieval sets (`wds/mscoco_captions`, `wds/flickr30k`, ...: the Hub's
`clip-benchmark/wds_<name>`), read as CLIP_benchmark 1.6.2's `build_wds_dataset` reads them
(LAION-AI/CLIP_benchmark, clip_benchmark/datasets/builder.py, tag v1.6.2).

A set is a folder holding `dataset_type.txt` (`retrieval`), `test/nshards.txt` (n) and the shards `test/0.tar` ...
`test/{n-1}.tar`. The shards are read in that order, each as webdataset's `tar_file_iterator` and `group_by_keys`
read a tar (webdataset/tariterators.py): regular files only, `__*__` metadata left out, a file's key its name up to
the first dot of its base name and its extension the rest (lower case), consecutive files of one key a sample. A
sample's image is the first of its `.webp`, `.png`, `.jpg`, `.jpeg` (`to_tuple`'s order) and its captions are its
`.txt` decoded as UTF-8 and cut by `str.splitlines` (`map_tuple(transform, str.splitlines)`). Its image becomes RGB as
webdataset's "pil" decoding makes it (PIL's `convert("RGB")`), or in compclip's viewer's colours where asked.

Reading is streamed: a shard's captions are read as the shard goes by, its images only named by their place in it,
and decoded from there when scored; nothing is unpacked to disk. Where CLIP_benchmark stops with a traceback, a
shard listed in nshards.txt that is not there is named in the result's `absent` (its samples not scored), and a
sample without an image or without captions is a named, counted skip; either marks the result incomplete.
"""
from __future__ import annotations

import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from ...data.formats.webdataset_shards import tar_members
from ...data.images import ImageRef
from ...data.readers import decode_image
from ...errors import DataError
from ..base import Malformed

SHARDS = Path("test") / "nshards.txt"  # CLIP_benchmark's default split, `test`
TYPE_FILE = "dataset_type.txt"
IMAGE_EXTENSIONS = ("webp", "png", "jpg", "jpeg")  # to_tuple's order: the first one a sample holds is its image
CAPTIONS = "txt"
META_NAME = re.compile(r"__[^/]*__($|/)")  # tar_file_iterator's `skip_meta`
KEY_AND_EXTENSION = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's `base_plus_ext`


@dataclass(frozen=True)
class ShardMember(ImageRef):
    """An image stored in the uncompressed tar `file`, its bytes `size` long at byte `offset`: read from there when
    decoded (in the scorer's workers), so a set is never held in memory whole nor unpacked."""

    offset: int = 0
    size: int = 0

    def present(self) -> bool:
        return True  # the shard lists it; bytes that are not an image are the decoder's to name

    def decode(self) -> Image.Image:
        with open(self.file, "rb") as f:
            f.seek(self.offset)
            return decode_image(f.read(self.size), self.colours)


@dataclass
class WdsSet:
    """What a set's shards hold: (image, caption) pairs in shard and sample order, each sample's captions in its `.txt`'s
    order; the shards or files not there (`absent`), and the samples skipped (`malformed`). `colours`: how its images
    become RGB (`compclip.data.readers.RGB_RULES`)."""

    colours: str = "clip_benchmark"
    pairs: list[tuple[ShardMember, str]] = field(default_factory=list)
    absent: dict[str, str] = field(default_factory=dict)
    malformed: Malformed = field(default_factory=Malformed)


def is_wds(folder: Path) -> bool:
    """A folder laid out as CLIP_benchmark's wds sets are (its shard count or its type file there)."""
    return (folder / SHARDS).is_file() or (folder / TYPE_FILE).is_file()


def read_wds(folder: Path, colours: str = "clip_benchmark") -> WdsSet:
    """The pairs of the wds retrieval set in `folder`, its images made RGB by the rule `colours` names (CLIP_benchmark's
    by default); a set of another type, or without its shard count, is named in `absent` and gives no pairs."""
    found = WdsSet(colours)
    kind = _dataset_type(folder)
    if kind != "retrieval":
        found.absent[str(folder / TYPE_FILE)] = (f"{kind!r}: CLIP_benchmark reads the set as {kind}, not retrieval (a set without "
                                                 "the file is read as classification): not scored")
        return found
    if not (folder / SHARDS).is_file():
        found.absent[str(folder / SHARDS)] = "missing: a wds set names its number of shards there (CLIP_benchmark requires it): not scored"
        return found
    count = shard_count(folder / SHARDS)
    for number in range(count):
        shard = folder / SHARDS.parent / f"{number}.tar"
        if not shard.is_file():
            found.absent[str(shard)] = f"missing: {SHARDS} lists {count} shards; the samples of this one are not scored"
            continue
        _read_shard(shard, found)
    return found


def _dataset_type(folder: Path) -> str:
    """`dataset_type.txt` as CLIP_benchmark reads it (stripped, lower case); without it, "classification", as there."""
    try:
        return (folder / TYPE_FILE).read_text(encoding="utf-8").strip().lower()
    except FileNotFoundError:
        return "classification"
    except UnicodeDecodeError as e:
        raise DataError(f"{folder / TYPE_FILE}: not UTF-8 ({e.reason} at byte {e.start}); it holds one word, `retrieval`") from None


def shard_count(file: Path) -> int:
    """`test/nshards.txt`: a whole number, at least 1 (CLIP_benchmark's `int(...)` of the file)."""
    text = file.read_text(encoding="utf-8", errors="replace")
    try:
        count = int(text)
    except ValueError:
        raise DataError(f"{file}: {text.strip()[:40]!r} is not a number of shards; the file holds one whole number, "
                        "n for shards 0.tar ... {n-1}.tar") from None
    if count < 1:
        raise DataError(f"{file}: {count} shards; a set has at least one (0.tar)")
    return count


@dataclass
class _Sample:
    """The files of one sample as a shard goes by: captions read, images as their tar entries."""

    key: str | None = None
    files: dict[str, bytes | tarfile.TarInfo] = field(default_factory=dict)
    repeated: str = ""  # an extension met twice (webdataset's group_by_keys raises there)


def _read_shard(shard: Path, found: WdsSet) -> None:
    """Add the samples of `shard` to `found`, read in one pass (`tar_members`: webdataset's stream, a damaged header
    named rather than taken for the shard's end); a shard cut off or not a tar is named in `absent`, with the samples
    before its damage kept."""
    sample, damage = _Sample(), []
    try:
        for info, read in tar_members(str(shard), damage.append):
            split = _key_and_extension(info)
            if split is None:
                continue
            key, extension = split
            if key != sample.key:
                _add_sample(shard, sample, found)
                sample = _Sample(key)
            if extension in sample.files:
                sample.repeated = extension
            sample.files[extension] = read() if extension == CAPTIONS else info
    except (tarfile.TarError, EOFError, OSError) as e:
        found.absent[str(shard)] = (f"unreadable tar ({type(e).__name__}: {e}): its samples from {sample.key or 'the first'} "
                                    "on are not scored")
        return
    finally:
        found.absent.update({f"{shard} damage {n}": why for n, why in enumerate(damage, 1)})
    _add_sample(shard, sample, found)


def _key_and_extension(info: tarfile.TarInfo) -> tuple[str, str] | None:
    """A member's sample key and extension as webdataset reads them; None for what webdataset passes over (not a regular
    file, `__*__` metadata, a name without an extension)."""
    name = info.name
    if not info.isreg() or META_NAME.match(name) or ("/" not in name and name.startswith("__") and name.endswith("__")):
        return None
    match = KEY_AND_EXTENSION.match(name)
    return (match.group(1), match.group(2).lower()) if match else None


def _add_sample(shard: Path, sample: _Sample, found: WdsSet) -> None:
    """The sample's (image, caption) pairs, or its skip named with why."""
    if sample.key is None:
        return
    problem, captions = _sample_problem(sample)
    if problem:
        found.malformed.skip(str(shard), f"sample {sample.key}", problem)
        return
    info = next(sample.files[e] for e in IMAGE_EXTENSIONS if e in sample.files)
    image = ShardMember(shard, info.name, colours=found.colours, offset=info.offset_data, size=info.size)
    found.pairs += [(image, caption) for caption in captions]


def _sample_problem(sample: _Sample) -> tuple[str | None, list[str]]:
    """(None, the captions) for a sample CLIP_benchmark scores, else (why not, [])."""
    if sample.repeated:
        return f"two files with the extension .{sample.repeated} (webdataset refuses the shard there)", []
    if not any(e in sample.files for e in IMAGE_EXTENSIONS):
        return f"no image ({', '.join('.' + e for e in IMAGE_EXTENSIONS)})", []
    if CAPTIONS not in sample.files:
        return "no captions (.txt)", []
    try:
        captions = sample.files[CAPTIONS].decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        return f"its .txt is not UTF-8 (byte {e.start}), as CLIP_benchmark decodes it", []
    return (None, captions) if captions else ("an empty .txt: no captions", [])
