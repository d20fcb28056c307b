"""The concept cache: Parquet shards of records keyed by caption, built by a parallel, resumable engine.

A store folder holds `manifest.json` (the pipeline and options that made it) and
`part-NNNNN.parquet` shards, each written atomically once complete. Keys hash the
caption with the pipeline and options, so a second run reads instead of parsing and a
killed run resumes from its finished shards.
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import MissingConceptError, MissingFileError, UsageError
from ..io import atomic_path, write_json
from ..progress import progress
from .pipeline import BATCH_SIZE, PARSED, clean, extract_unique, load_nlp, parse_what, pipeline_id

MANIFEST = "manifest.json"
SHARD_SIZE = 20_000
CHUNK = 1_000  # captions per task handed to a worker

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
    return pa.schema([("key", pa.string()), ("caption", pa.string())] + [c for f in what for c in COLUMNS[f]])


def _to_row(key: str, rec: dict[str, Any]) -> dict[str, Any]:
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


def _from_row(row: dict[str, Any]) -> dict[str, Any]:
    rec = {"caption": row["caption"]}
    if "noun_phrases" in row:
        rec["noun_phrases"] = [(d["text"], d["start"], d["end"]) for d in row["noun_phrases"]]
    if "pos" in row:
        rec["pos"] = [(d["text"], d["start"], d["end"], d["pos"]) for d in row["pos"]]
    if "graph_nodes" in row:
        rec["graph"] = {
            "nodes": [(d["text"], d["start"], d["end"]) for d in row["graph_nodes"]],
            "edges": [(d["relation"], d["subject"], d["object"]) for d in row["graph_edges"]],
        }
    if "keywords" in row:
        rec["keywords"] = [(d["class"], d["keyword"], d["start"], d["end"]) for d in row["keywords"]]
    return rec


class ConceptStore:
    """Concept records on disk, looked up by caption: `store.get(caption)`, `caption in store`."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        path = self.folder / MANIFEST
        if not path.is_file():
            raise MissingFileError(f"{path}: not a concept store (run `compclip concepts` first)")
        self.config = json.loads(path.read_text(encoding="utf-8"))["config"]
        self.what = tuple(self.config["what"])
        self._records: dict[str, dict[str, Any]] | None = None

    @staticmethod
    def config_for(what: Sequence[str], with_prep: bool, nlp) -> dict[str, Any]:
        return {"pipeline": pipeline_id(nlp), "what": list(what), "with_prep": with_prep}

    def key(self, caption: Any) -> str:
        return caption_key(self.config, clean(caption))

    def shards(self) -> list[Path]:
        return sorted(self.folder.glob("part-*.parquet"))

    def keys(self) -> set[str]:
        return {k for shard in self.shards() for k in pq.read_table(shard, columns=["key"]).column("key").to_pylist()}

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._records is None:
            self._records = {row["key"]: row for shard in self.shards() for row in pq.read_table(shard).to_pylist()}
        return self._records

    def get(self, caption: Any) -> dict[str, Any] | None:
        row = self._load().get(self.key(caption))
        return None if row is None else _from_row(row)

    def __getitem__(self, caption: Any) -> dict[str, Any]:
        rec = self.get(caption)
        if rec is None:
            raise MissingConceptError(f"{self.folder}: no concepts for caption {caption!r}; run `compclip concepts` over it")
        return rec

    def __contains__(self, caption: Any) -> bool:
        return self.key(caption) in self._load()

    def __len__(self) -> int:
        return len(self._load())


def caption_key(config: dict[str, Any], caption: str) -> str:
    salt = f"{config['pipeline']}|{','.join(config['what'])}|prep={config['with_prep']}|"
    return hashlib.blake2b((salt + caption).encode("utf-8"), digest_size=16).hexdigest()


_WORKER: dict[str, Any] = {}


def _work(task: tuple[list[str], list[str], tuple[str, ...], bool, int]) -> list[dict[str, Any]]:
    keys, captions, what, with_prep, batch_size = task
    records = extract_unique(captions, what, with_prep, _WORKER.get("nlp"), batch_size)
    return [_to_row(k, r) for k, r in zip(keys, records, strict=True)]


def _chunks(captions: Iterable[Any], config: dict[str, Any], known: set[str], size: int) -> Iterator[tuple[list[str], list[str]]]:
    """Distinct captions not in the store yet, in chunks of (keys, captions)."""
    keys, chunk = [], []
    for raw in captions:
        caption = clean(raw)
        key = caption_key(config, caption)
        if key in known:
            continue
        known.add(key)
        keys.append(key)
        chunk.append(caption)
        if len(chunk) == size:
            yield keys, chunk
            keys, chunk = [], []
    if chunk:
        yield keys, chunk


def build_store(
    captions: Iterable[Any],
    out: str | Path,
    what: str | Iterable[str] = ("noun_phrases",),
    *,
    with_prep: bool = False,
    workers: int = 1,
    batch_size: int = BATCH_SIZE,
    shard_size: int = SHARD_SIZE,
    total: int | None = None,
) -> tuple[ConceptStore, dict[str, Any]]:
    """Extract concepts for every caption not yet in the store at `out`; returns the store and run stats.

    `captions` streams (nothing is held whole but one shard); workers are processes, each
    with its own spaCy pipeline.
    """
    fields = parse_what(what)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; a concept store is a folder")
    if workers < 1 or shard_size < 1:
        raise UsageError(f"--workers and --shard-size must be at least 1, not {workers} and {shard_size}")
    nlp = load_nlp() if PARSED & set(fields) else None
    config = ConceptStore.config_for(fields, with_prep, nlp)
    manifest = out / MANIFEST
    if manifest.is_file():
        existing = json.loads(manifest.read_text(encoding="utf-8"))["config"]
        if existing != config:
            raise UsageError(f"{out} holds concepts made with {existing}, not {config}: choose another --out")
    else:
        write_json(manifest, {"config": config})
    for stale in out.glob(".part-*.tmp"):  # a killed run's unfinished shard
        stale.unlink()
    store = ConceptStore(out)
    known = store.keys()
    cached = len(known)
    next_shard = len(store.shards())
    stats = {"captions": 0, "parsed": 0, "cached_records": cached, "shards_written": 0}

    def counted(items: Iterable[Any]) -> Iterator[Any]:
        for item in items:
            stats["captions"] += 1
            yield item

    start = time.perf_counter()
    bar = progress(counted(captions), "concepts", total=total, unit="caption")
    tasks = ((keys, chunk, fields, with_prep, batch_size) for keys, chunk in _chunks(bar, config, known, CHUNK))
    _WORKER["nlp"] = nlp  # forked workers inherit the loaded pipeline: no reload
    pool = mp.get_context("fork").Pool(workers) if workers > 1 else None
    results = pool.imap(_work, tasks) if pool is not None else map(_work, tasks)
    rows: list[dict[str, Any]] = []
    try:
        for chunk_rows in results:
            rows.extend(chunk_rows)
            stats["parsed"] += len(chunk_rows)
            while len(rows) >= shard_size:
                _write_shard(out, next_shard, rows[:shard_size], fields)
                rows, next_shard, stats["shards_written"] = rows[shard_size:], next_shard + 1, stats["shards_written"] + 1
        if rows:
            _write_shard(out, next_shard, rows, fields)
            stats["shards_written"] += 1
    finally:
        if pool is not None:
            pool.terminate()
        _WORKER.clear()
    stats["seconds"] = time.perf_counter() - start
    stats["captions_per_s"] = stats["captions"] / stats["seconds"] if stats["seconds"] else float("inf")
    return ConceptStore(out), stats


def _write_shard(out: Path, index: int, rows: list[dict[str, Any]], what: Sequence[str]) -> None:
    table = pa.Table.from_pylist(rows, schema=schema(what))
    with atomic_path(out / f"part-{index:05d}.parquet") as tmp:
        pq.write_table(table, tmp)
