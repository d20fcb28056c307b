"""The concept store, read in place: Arrow shards memory-mapped and a sorted key index searched with numpy.

Format 2 (see `docs/data.md`), one folder:

    manifest.json                 {"format": 2, "config": {pipeline, what, with_prep}}
    parts/<i>-of-<n>/shard-NNNNN.arrow   Arrow IPC files of (key, caption, concepts as JSON), one record
                                  batch each, written atomically
    parts/<i>-of-<n>/done.json    the part finished (its run's counts)
    index.json                    the shards in global row order and the three index arrays below
    index/hi-<id>.npy, lo-<id>.npy  uint64: every record's key as two little-endian halves, sorted
    index/rows-<id>.npy           the global row of each sorted key

A record's key is the 16-byte BLAKE2b of the caption salted with the config, so a batch of
captions is found by one `searchsorted` over the first halves, checked on the second. Opening a
store reads two small JSON files and maps three arrays: it costs the same at 3 M records as at
3 k, and every process that reads it (DataLoader workers, ranks) shares the pages through the
page cache. A lookup decodes one record: one JSON text.
"""
from __future__ import annotations

import bisect
import hashlib
import json
import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..data.concept_records import record_from_json
from ..errors import DataError, MissingConceptError, MissingFileError
from ..io import atomic_path, refuse_links, write_json

FORMAT = 2
MANIFEST = "manifest.json"
INDEX = "index.json"
PARTS = "parts"
DONE = "done.json"
KEY_BYTES = 16

SCHEMA = pa.schema([("key", pa.binary(KEY_BYTES)), ("caption", pa.string()), ("concepts", pa.string())])


def to_row(key: bytes, rec: dict[str, Any]) -> dict[str, Any]:
    """A concept record (`compclip.concepts.extract`) as a row: its fields but the caption as one JSON text,
    so a lookup touches one place on disk and decodes with one `json.loads`."""
    fields = {k: v for k, v in rec.items() if k != "caption"}
    return {"key": key, "caption": rec["caption"], "concepts": json.dumps(fields, ensure_ascii=False, separators=(",", ":"))}


def write_shard(path: Path, rows: list[dict[str, Any]]) -> None:
    """One Arrow IPC file holding one record batch, in place only once complete."""
    batch = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    with atomic_path(path) as tmp, pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, SCHEMA) as writer:
        writer.write_batch(batch)


def key_salt(config: dict[str, Any]) -> bytes:
    return f"{config['pipeline']}|{','.join(config['what'])}|prep={config['with_prep']}|".encode()


def caption_key(config: dict[str, Any], caption: str) -> bytes:
    return hashlib.blake2b(key_salt(config) + caption.encode("utf-8"), digest_size=KEY_BYTES).digest()


def manifest_of(path: Path) -> dict[str, Any]:
    """A store's manifest as written, of any format; a damaged one is refused in one line."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(manifest["config"]["what"], list):  # every format has its config's fields
            raise TypeError("config.what is not a list")
    except (ValueError, AttributeError, KeyError, TypeError) as e:
        raise DataError(f"{path}: a damaged store manifest ({type(e).__name__}: {e}); the store's shards are kept: move the "
                        f"folder aside and run `compclip concepts CAPTIONS --out {path.parent}` into a new one") from None
    return manifest


def read_manifest(folder: Path) -> dict[str, Any]:
    """The store's manifest; a store of another format is refused with the command that rebuilds it."""
    path = folder / MANIFEST
    if not path.is_file():
        raise MissingFileError(f"{path}: not a concept store (run `compclip concepts` first)")
    manifest = manifest_of(path)
    found = manifest.get("format", 1)
    if found != FORMAT:
        hint = (f"upgrade it in place, without parsing again: `compclip concepts CAPTIONS --out {folder}`"
                if found < FORMAT else "it was written by a newer compclip: upgrade compclip")
        raise DataError(f"{folder}: a concept store of format {found}; this compclip reads format {FORMAT}: {hint}")
    return manifest


def shard_files(folder: Path) -> list[Path]:
    """Every finished shard of every part, in a fixed order."""
    return sorted((folder / PARTS).glob("*/shard-*.arrow"))


def damaged_shard(path: Path, e: Exception) -> DataError:
    """The error of a shard that does not read: the file, why, and the command that repairs the store."""
    store = path.parent.parent.parent
    return DataError(f"{path}: a damaged concept shard ({type(e).__name__}: {e}); run `compclip concepts CAPTIONS --out {store}` "
                     "again with the same options: it removes the shard and parses its captions again, keeping the rest")


def shard_keys(path: Path) -> np.ndarray:
    """A shard's keys as an (N, 16) uint8 array."""
    try:
        with pa.memory_map(str(path)) as source:
            column = pa.ipc.open_file(source).read_all().column("key").combine_chunks()
            raw = np.frombuffer(column.buffers()[1], np.uint8, len(column) * KEY_BYTES, column.offset * KEY_BYTES)
            return raw.reshape(-1, KEY_BYTES).copy()
    except (pa.ArrowException, OSError, KeyError, ValueError) as e:
        raise damaged_shard(path, e) from None


INDEX_FILE = re.compile(r"(hi|lo|rows)-[0-9a-f]{12}\.npy")


def write_index(folder: Path) -> int:
    """Index every shard of the store; returns the number of distinct records. A key found twice
    (parts run with different counts) keeps its first record."""
    shards = shard_files(folder)
    keys = [shard_keys(p) for p in shards]
    every = np.concatenate(keys) if keys else np.empty((0, KEY_BYTES), np.uint8)
    words = every.view("<u8").reshape(-1, 2)
    order = np.lexsort((np.arange(len(every)), words[:, 1], words[:, 0]))  # by prefix, then rest, then first seen
    if len(order):
        sorted_words = words[order]
        first = np.ones(len(order), bool)
        first[1:] = np.any(sorted_words[1:] != sorted_words[:-1], axis=1)
        order = order[first]
    ident = uuid.uuid4().hex[:12]
    index_dir = folder / "index"
    refuse_links(folder, ("index",))
    names = {name: f"index/{name}-{ident}.npy" for name in ("hi", "lo", "rows")}
    dtype = np.uint32 if len(every) < 2**32 else np.uint64
    for name, array in (("hi", words[order, 0]), ("lo", words[order, 1]), ("rows", order.astype(dtype))):
        with atomic_path(folder / names[name]) as tmp, open(tmp, "wb") as f:
            np.save(f, np.ascontiguousarray(array))
    write_json(folder / INDEX, {
        "format": FORMAT, "records": len(order),
        "shards": [[str(p.relative_to(folder)), len(k)] for p, k in zip(shards, keys, strict=True)], **names,
    })
    for old in index_dir.iterdir():  # only the index files an earlier write_index made
        if INDEX_FILE.fullmatch(old.name) and f"index/{old.name}" not in names.values():
            old.unlink(missing_ok=True)
    return len(order)


class _Strings:
    """A string column read in place: offsets and bytes as views of the mapped file."""

    def __init__(self, array: pa.Array):
        _, offsets, data = array.buffers()
        self.offsets = np.frombuffer(offsets, np.int32, len(array) + 1, array.offset * 4)
        self.data = memoryview(data) if data is not None else memoryview(b"")

    def __getitem__(self, row: int) -> str:
        a, b = self.offsets[row : row + 2].tolist()
        return str(self.data[a:b], "utf-8")


class _Shard:
    """One memory-mapped shard: a record decoded only when asked for."""

    def __init__(self, path: Path):
        try:
            self.source = pa.memory_map(str(path))
            reader = pa.ipc.open_file(self.source)
            if reader.num_record_batches != 1 or reader.schema != SCHEMA:
                raise DataError(f"{path}: not a concept shard of format {FORMAT} (one record batch of {SCHEMA.names})")
            batch = reader.get_batch(0)
        except (pa.ArrowException, OSError) as e:
            raise damaged_shard(path, e) from None
        self.caption, self.concepts = _Strings(batch.column("caption")), _Strings(batch.column("concepts"))

    def record(self, row: int) -> dict[str, Any]:
        return record_from_json({"caption": self.caption[row], **json.loads(self.concepts[row])})


class ConceptStore:
    """Concept records on disk, looked up by caption: `store.get(caption)`, `store[caption]`, `caption in store`.

    Nothing is read whole: a lookup hashes the caption, searches the mapped index and decodes one
    record. Picklable: a DataLoader worker re-opens the maps instead of copying them.
    """

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.config = read_manifest(self.folder)["config"]
        self.what = tuple(self.config["what"])
        self._salted = hashlib.blake2b(key_salt(self.config), digest_size=KEY_BYTES)
        self._open_index()

    def _open_index(self) -> None:
        path = self.folder / INDEX
        if not path.is_file():
            parts = sorted(p.name for p in (self.folder / PARTS).glob("*") if p.is_dir())
            raise DataError(f"{self.folder}: the store is not indexed yet (parts present: {', '.join(parts) or 'none'}); "
                            f"finish the missing parts, or run `compclip concepts CAPTIONS --out {self.folder}` to complete and index it")
        try:
            index = json.loads(path.read_text(encoding="utf-8"))
            self._paths = [self.folder / p for p, _ in index["shards"]]
            self._starts = np.cumsum([0] + [n for _, n in index["shards"]]).tolist()
            self._size = index["records"]
            load = lambda name: np.load(self.folder / index[name], mmap_mode="r").view(np.ndarray) if self._size else np.empty(0, np.uint64)  # noqa: E731
            self._hi, self._lo, self._rows = load("hi"), load("lo"), load("rows")
            if not len(self._hi) == len(self._lo) == len(self._rows) == self._size:
                raise ValueError(f"the index lists {self._size} records, its arrays hold {len(self._hi)}")
        except (OSError, ValueError, KeyError, TypeError) as e:  # a cut copy, a truncated .npy, an object-dtype array
            raise DataError(f"{path}: a damaged store index ({type(e).__name__}: {e}); run `compclip concepts CAPTIONS --out "
                            f"{self.folder}` again: it writes the index anew from the shards") from None
        self._shards: dict[int, _Shard] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"folder": self.folder}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["folder"])

    def key(self, caption: Any) -> bytes:
        hasher = self._salted.copy()
        hasher.update(caption.encode("utf-8", "replace") if isinstance(caption, str) else b"")  # as `pipeline.clean` does
        return hasher.digest()

    def _shard(self, s: int) -> _Shard:
        shard = self._shards.get(s)
        if shard is None:
            shard = self._shards[s] = _Shard(self._paths[s])
        return shard

    def _locate(self, keys: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(found, shard, row) per key, vectorised: one `searchsorted` over the first halves for all keys."""
        found = np.zeros(len(keys), bool)
        if not keys or not self._size:
            return found, found.astype(np.int64), found.astype(np.int64)
        words = np.frombuffer(b"".join(keys), "<u8").reshape(-1, 2)
        at = self._hi.searchsorted(words[:, 0])
        pending = np.flatnonzero(at < self._size)
        while len(pending):  # usually one pass: a shared first half sends a key on to the next entry
            same = self._hi[at[pending]] == words[pending, 0]
            hit = same & (self._lo[at[pending]] == words[pending, 1])
            found[pending[hit]] = True
            pending = pending[same & ~hit]
            at[pending] += 1
            pending = pending[at[pending] < self._size]
        rows = np.where(found, self._rows[np.minimum(at, self._size - 1)], 0).astype(np.int64)
        starts = np.asarray(self._starts)
        shard = np.searchsorted(starts, rows, "right") - 1
        return found, shard, rows - starts[shard]

    def get_many(self, captions: Sequence[Any]) -> list[dict[str, Any] | None]:
        """The records of many captions (None where absent): a batch's keys found in one vectorised search."""
        found, shard, local = self._locate([self.key(c) for c in captions])
        return [self._shard(s).record(r) if hit else None for hit, s, r in zip(found.tolist(), shard.tolist(), local.tolist(), strict=True)]

    def _find(self, key: bytes) -> tuple[int, int] | None:
        """(shard, row) of one key: `_locate` without numpy's per-call cost, for single lookups."""
        hi, lo = int.from_bytes(key[:8], "little"), int.from_bytes(key[8:], "little")
        i = int(self._hi.searchsorted(np.uint64(hi)))
        while i < self._size and int(self._hi[i]) == hi:
            if int(self._lo[i]) == lo:
                row = int(self._rows[i])
                s = bisect.bisect_right(self._starts, row) - 1
                return s, row - self._starts[s]
            i += 1
        return None

    def get(self, caption: Any) -> dict[str, Any] | None:
        found = self._find(self.key(caption))
        return None if found is None else self._shard(found[0]).record(found[1])

    def __getitem__(self, caption: Any) -> dict[str, Any]:
        rec = self.get(caption)
        if rec is None:
            raise MissingConceptError(f"{self.folder}: no concepts for caption {caption!r}; run `compclip concepts` over it")
        return rec

    def __contains__(self, caption: Any) -> bool:
        return self._find(self.key(caption)) is not None

    def contains_keys(self, keys: Sequence[bytes]) -> np.ndarray:
        """Which of these keys the store holds (the builder's check of what is done)."""
        return self._locate(keys)[0]

    def __len__(self) -> int:
        return self._size
