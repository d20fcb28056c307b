"""The concept store, read in place: Arrow shards memory-mapped and a sorted key index searched with numpy.

Format 2 (see `docs/data.md`), one folder:

    manifest.json                 {"format": 2, "config": {pipeline, what, with_prep}}
    parts/<i>-of-<n>/shard-NNNNN.arrow   Arrow IPC files, one record batch each, written atomically
    parts/<i>-of-<n>/done.json    the part finished (its run's counts)
    index.json                    the shards in global row order and the two index arrays below
    index/keys-<id>.npy           uint64: the first 8 bytes of every record's key, sorted
    index/rows-<id>.npy           the global row of each sorted key

A record's key is the 16-byte BLAKE2b of the caption salted with the config, so a record is
found by one `searchsorted` and checked against the full key in its shard. Opening a store reads
two small JSON files and maps two arrays: it costs the same at 3 M records as at 3 k, and every
process that reads it (DataLoader workers, ranks) shares the pages through the page cache.
"""
from __future__ import annotations

import bisect
import hashlib
import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import DataError, MissingConceptError, MissingFileError
from ..io import atomic_path, write_json

FORMAT = 2
MANIFEST = "manifest.json"
INDEX = "index.json"
PARTS = "parts"
DONE = "done.json"
KEY_BYTES = 16

_span = [("text", pa.string()), ("start", pa.int32()), ("end", pa.int32())]
COLUMNS = {
    "noun_phrases": [("noun_phrases", pa.list_(pa.struct(_span)))],
    "pos": [("pos", pa.list_(pa.struct([*_span, ("pos", pa.string())])))],
    "graph": [
        ("graph_nodes", pa.list_(pa.struct(_span))),
        ("graph_edges", pa.list_(pa.struct([("relation", pa.string()), ("subject", pa.int32()), ("object", pa.int32())]))),
    ],
    "keywords": [
        ("keywords", pa.list_(pa.struct([("class", pa.string()), ("keyword", pa.string()), ("start", pa.int32()), ("end", pa.int32())]))),
    ],
}


def schema(what: Sequence[str]) -> pa.Schema:
    return pa.schema([("key", pa.binary(KEY_BYTES)), ("caption", pa.string())] + [c for f in what for c in COLUMNS[f]])


def to_row(key: bytes, rec: dict[str, Any]) -> dict[str, Any]:
    """A concept record (`compclip.concepts.extract`) as a row of `schema`."""
    row = {"key": key, "caption": rec["caption"]}
    spans = lambda items: [{"text": t, "start": s, "end": e} for t, s, e in items]  # noqa: E731
    if "noun_phrases" in rec:
        row["noun_phrases"] = spans(rec["noun_phrases"])
    if "pos" in rec:
        row["pos"] = [{"text": t, "start": s, "end": e, "pos": p} for t, s, e, p in rec["pos"]]
    if "graph" in rec:
        row["graph_nodes"] = spans(rec["graph"]["nodes"])
        row["graph_edges"] = [{"relation": r, "subject": a, "object": b} for r, a, b in rec["graph"]["edges"]]
    if "keywords" in rec:
        row["keywords"] = [{"class": c, "keyword": k, "start": s, "end": e} for c, k, s, e in rec["keywords"]]
    return row


def write_shard(path: Path, rows: list[dict[str, Any]], what: Sequence[str]) -> None:
    """One Arrow IPC file holding one record batch, in place only once complete."""
    batch = pa.RecordBatch.from_pylist(rows, schema=schema(what))
    with atomic_path(path) as tmp, pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)


def key_salt(config: dict[str, Any]) -> bytes:
    return f"{config['pipeline']}|{','.join(config['what'])}|prep={config['with_prep']}|".encode()


def caption_key(config: dict[str, Any], caption: str) -> bytes:
    return hashlib.blake2b(key_salt(config) + caption.encode("utf-8"), digest_size=KEY_BYTES).digest()


def key_prefixes(keys: np.ndarray) -> np.ndarray:
    """The uint64 the index sorts by: a key's first 8 bytes, little-endian (`keys` is (N, 16) uint8)."""
    return np.ascontiguousarray(keys[:, :8]).view("<u8").ravel()


def read_manifest(folder: Path) -> dict[str, Any]:
    """The store's manifest; a store of another format is refused with the command that rebuilds it."""
    path = folder / MANIFEST
    if not path.is_file():
        raise MissingFileError(f"{path}: not a concept store (run `compclip concepts` first)")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    found = manifest.get("format", 1)
    if found != FORMAT:
        hint = ("upgrade it in place, without parsing again: `compclip concepts CAPTIONS --out " f"{folder}`"
                if found < FORMAT else "it was written by a newer compclip: upgrade compclip")
        raise DataError(f"{folder}: a concept store of format {found}; this compclip reads format {FORMAT}: {hint}")
    return manifest


def shard_files(folder: Path) -> list[Path]:
    """Every finished shard of every part, in a fixed order."""
    return sorted((folder / PARTS).glob("*/shard-*.arrow"))


def shard_keys(path: Path) -> np.ndarray:
    """A shard's keys as an (N, 16) uint8 array."""
    with pa.memory_map(str(path)) as source:
        column = pa.ipc.open_file(source).read_all().column("key").combine_chunks()
        raw = np.frombuffer(column.buffers()[1], np.uint8, len(column) * KEY_BYTES, column.offset * KEY_BYTES)
        return raw.reshape(-1, KEY_BYTES).copy()


def write_index(folder: Path) -> int:
    """Index every shard of the store; returns the number of distinct records. A key found twice
    (parts run with different counts) keeps its first record."""
    shards = shard_files(folder)
    keys = [shard_keys(p) for p in shards]
    every = np.concatenate(keys) if keys else np.empty((0, KEY_BYTES), np.uint8)
    words = every.view("<u8") if len(every) else np.empty((0, 2), "<u8")
    order = np.lexsort((np.arange(len(every)), words[:, 1], words[:, 0]))  # by prefix, then rest, then first seen
    if len(order):
        sorted_words = words[order]
        first = np.ones(len(order), bool)
        first[1:] = np.any(sorted_words[1:] != sorted_words[:-1], axis=1)
        order = order[first]
    ident = uuid.uuid4().hex[:12]
    index_dir = folder / "index"
    names = {"keys": f"index/keys-{ident}.npy", "rows": f"index/rows-{ident}.npy"}
    dtype = np.uint32 if len(every) < 2**32 else np.uint64
    for name, array in (("keys", words[order, 0] if len(order) else np.empty(0, "<u8")), ("rows", order.astype(dtype))):
        with atomic_path(folder / names[name]) as tmp, open(tmp, "wb") as f:
            np.save(f, np.ascontiguousarray(array))
    write_json(folder / INDEX, {
        "format": FORMAT, "records": len(order),
        "shards": [[str(p.relative_to(folder)), len(k)] for p, k in zip(shards, keys, strict=True)], **names,
    })
    for old in index_dir.glob("*.npy"):
        if f"index/{old.name}" not in names.values():
            old.unlink(missing_ok=True)
    return len(order)


class _Strings:
    """A string column read in place: offsets and bytes as numpy views of the mapped file."""

    def __init__(self, array: pa.Array):
        _, offsets, data = array.buffers()
        self.offsets = np.frombuffer(offsets, np.int32, len(array) + 1, array.offset * 4)
        self.data = memoryview(data) if data is not None else memoryview(b"")

    def take(self, a: int, b: int) -> list[str]:
        o = self.offsets[a : b + 1].tolist()
        return [str(self.data[o[k] : o[k + 1]], "utf-8") for k in range(b - a)]


class _Ints:
    def __init__(self, array: pa.Array):
        self.values = array.to_numpy(zero_copy_only=True)

    def take(self, a: int, b: int) -> list[int]:
        return self.values[a:b].tolist()


class _TupleList:
    """A list<struct> column: row r decodes to a list of tuples, one per struct, fields in order."""

    def __init__(self, array: pa.ListArray):
        self.offsets = array.offsets.to_numpy(zero_copy_only=True)
        values = array.values
        fields = (values.field(i) for i in range(values.type.num_fields))
        self.fields = [_Strings(f) if pa.types.is_string(f.type) else _Ints(f) for f in fields]

    def get(self, row: int) -> list[tuple]:
        a, b = self.offsets[row : row + 2].tolist()
        return list(zip(*(f.take(a, b) for f in self.fields), strict=True)) if b > a else []


class _Shard:
    """One memory-mapped shard: its keys and columns as views, a record decoded on request."""

    def __init__(self, path: Path):
        self.source = pa.memory_map(str(path))
        reader = pa.ipc.open_file(self.source)
        if reader.num_record_batches != 1:
            raise DataError(f"{path}: a concept shard holds one record batch, this one {reader.num_record_batches}")
        batch = reader.get_batch(0)
        key = batch.column("key")
        self.keys = memoryview(key.buffers()[1])[key.offset * KEY_BYTES :]
        self.caption = _Strings(batch.column("caption"))
        self.lists = {name: _TupleList(batch.column(name)) for name in batch.schema.names if name not in ("key", "caption")}

    def key(self, row: int) -> bytes:
        return bytes(self.keys[row * KEY_BYTES : (row + 1) * KEY_BYTES])

    def record(self, row: int) -> dict[str, Any]:
        rec: dict[str, Any] = {"caption": self.caption.take(row, row + 1)[0]}
        for name, column in self.lists.items():
            if name == "graph_nodes":
                rec["graph"] = {"nodes": column.get(row), "edges": self.lists["graph_edges"].get(row)}
            elif name != "graph_edges":
                rec[name] = column.get(row)
        return rec


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
        index = json.loads(path.read_text(encoding="utf-8"))
        self._paths = [self.folder / p for p, _ in index["shards"]]
        self._starts = np.cumsum([0] + [n for _, n in index["shards"]]).tolist()
        self._size = index["records"]
        load = lambda name: np.load(self.folder / index[name], mmap_mode="r").view(np.ndarray) if self._size else np.empty(0, np.uint64)  # noqa: E731
        self._keys, self._rows = load("keys"), load("rows")
        self._shards: dict[int, _Shard] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"folder": self.folder}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["folder"])

    def key(self, caption: Any) -> bytes:
        hasher = self._salted.copy()
        hasher.update(caption.encode("utf-8", "replace") if isinstance(caption, str) else b"")  # as `pipeline.clean` does
        return hasher.digest()

    def _find(self, key: bytes) -> tuple[_Shard, int] | None:
        prefix = int.from_bytes(key[:8], "little")
        i = int(self._keys.searchsorted(np.uint64(prefix)))
        while i < self._size and int(self._keys[i]) == prefix:
            row = int(self._rows[i])
            s = bisect.bisect_right(self._starts, row) - 1
            shard = self._shards.get(s)
            if shard is None:
                shard = self._shards[s] = _Shard(self._paths[s])
            if shard.key(row - self._starts[s]) == key:
                return shard, row - self._starts[s]
            i += 1
        return None

    def get(self, caption: Any) -> dict[str, Any] | None:
        found = self._find(self.key(caption))
        return None if found is None else found[0].record(found[1])

    def __getitem__(self, caption: Any) -> dict[str, Any]:
        rec = self.get(caption)
        if rec is None:
            raise MissingConceptError(f"{self.folder}: no concepts for caption {caption!r}; run `compclip concepts` over it")
        return rec

    def __contains__(self, caption: Any) -> bool:
        return self._find(self.key(caption)) is not None

    def contains_keys(self, keys: Sequence[bytes]) -> np.ndarray:
        """Which of these keys the index holds, vectorised (the builder's check of what is done)."""
        if not keys or not self._size:
            return np.zeros(len(keys), bool)
        words = np.frombuffer(b"".join(keys), "<u8").reshape(-1, 2)
        hits = np.zeros(len(keys), bool)
        left = self._keys.searchsorted(words[:, 0])
        candidates = np.flatnonzero((left < self._size) & (self._keys[np.minimum(left, self._size - 1)] == words[:, 0]))
        for j in candidates:  # confirm the whole key (prefix collisions included)
            hits[j] = self._find(keys[j]) is not None
        return hits

    def __len__(self) -> int:
        return self._size
