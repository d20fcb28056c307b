"""The engine that fills a concept store: parallel, resumable, and split into parts that machines run apart.

A caption belongs to part `i` of `n` by its key (`key mod n`), so `--part i/n` runs on any
machine without coordination; each part writes its own folder of shards, each shard atomically,
so a killed part resumes from its finished shards. The part that finds all `n` done writes the
index over every part's shards (the records are never copied).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .. import stops
from ..errors import DataError, UsageError
from ..io import FolderLock, refuse_links, write_json
from ..parts import parse_part  # noqa: F401 (the concepts command's, as `compclip.concepts.parse_part`)
from ..progress import progress
from .config import SHARD_SIZE
from .pipeline import BATCH_SIZE, PARSED, clean, extract_unique, load_nlp, parse_what, pipeline_id
from .store import (
    DONE,
    FORMAT,
    INDEX,
    MANIFEST,
    PARTS,
    ConceptStore,
    caption_key,
    manifest_of,
    shard_keys,
    to_row,
    write_index,
    write_shard,
)

log = logging.getLogger("compclip.concepts")

CHUNK = 1_000  # captions per task handed to a worker
LOCK_NAME = ".lock"  # in a part's folder: one run fills a part at a time
INDEX_LOCK_NAME = ".index.lock"  # in the store: one part writes the index at a time
STORE_FOLDERS = ("index", PARTS)  # what a run writes into and deletes from: a link planted there is refused


def part_of(key: bytes, n: int) -> int:
    return int.from_bytes(key[8:], "little") % n


def part_folder(out: Path, i: int, n: int) -> Path:
    return out / PARTS / f"{i}-of-{n}"


def config_for(what: tuple[str, ...], with_prep: bool, nlp) -> dict[str, Any]:
    return {"pipeline": pipeline_id(nlp), "what": list(what), "with_prep": with_prep}


_WORKER: dict[str, Any] = {}


def _work(task: tuple[list[bytes], list[str], tuple[str, ...], bool, int]) -> list[dict[str, Any]]:
    keys, captions, what, with_prep, batch_size = task
    records = extract_unique(captions, what, with_prep, _WORKER.get("nlp"), batch_size)
    return [to_row(k, r) for k, r in zip(keys, records, strict=True)]


class _Done:
    """The keys already in the store: the index (searched in batches) plus this part's own shards."""

    def __init__(self, out: Path, segment: Path):
        self.store = ConceptStore(out) if (out / "index.json").is_file() else None
        own = [shard_keys(p) for p in sorted(segment.glob("shard-*.arrow"))]
        self.seen = {row.tobytes() for keys in own for row in keys}
        own_keys = list(self.seen)
        indexed = self.store.contains_keys(own_keys) if self.store is not None else np.zeros(len(own_keys), bool)
        self.cached = (len(self.store) if self.store is not None else 0) + int((~indexed).sum())

    def new(self, keys: list[bytes]) -> list[bool]:
        old = self.store.contains_keys(keys) if self.store is not None else np.zeros(len(keys), bool)
        fresh = []
        for key, in_index in zip(keys, old.tolist(), strict=True):
            fresh.append(not in_index and key not in self.seen)
            self.seen.add(key)
        return fresh


def _chunks(captions: Iterable[Any], config: dict[str, Any], done: _Done, part: tuple[int, int], stats: dict[str, int],
            size: int) -> Iterator[tuple[list[bytes], list[str]]]:
    """This part's distinct captions not in the store yet, in chunks of (keys, captions) of at most `size`."""
    i, n = part

    def fresh(block: list[tuple[bytes, str]]) -> Iterator[tuple[list[bytes], list[str]]]:
        new = [kc for kc, ok in zip(block, done.new([k for k, _ in block]), strict=True) if ok]
        if new:
            yield [k for k, _ in new], [c for _, c in new]

    block: list[tuple[bytes, str]] = []
    for raw in captions:
        caption = clean(raw)
        key = caption_key(config, caption)
        if part_of(key, n) != i:
            stats["other_parts"] += 1
            continue
        block.append((key, caption))
        if len(block) == size:
            yield from fresh(block)
            block = []
    yield from fresh(block)


def _start(out: Path, config: dict[str, Any]) -> None:
    """Write the manifest, or check that the store at `out` was made the same way."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; a concept store is a folder")
    refuse_links(out, STORE_FOLDERS)
    manifest = out / MANIFEST
    if not manifest.is_file():
        write_json(manifest, {"format": FORMAT, "config": config})
        return
    found = manifest_of(manifest)
    if found["config"] != config:
        raise UsageError(f"{out} holds concepts made with {found['config']}, not {config}: choose another --out")
    if found.get("format", 1) == 1:
        _upgrade(out, found)
    elif found["format"] != FORMAT:
        raise UsageError(f"{out}: a concept store of format {found['format']}, written by a newer compclip: upgrade compclip")


def _upgrade(out: Path, manifest: dict[str, Any]) -> None:
    """Rewrite a format-1 store (Parquet shards of nested columns, hex keys) as format 2 without parsing again."""
    import pyarrow.parquet as pq

    fields = {"noun_phrases": ("text", "start", "end"), "pos": ("text", "start", "end", "pos"), "graph_nodes": ("text", "start", "end"),
              "keywords": ("class", "keyword", "start", "end"), "graph_edges": ("relation", "subject", "object")}

    def record(row: dict[str, Any]) -> dict[str, Any]:  # by name: a writer may order a struct's fields otherwise (pyarrow 14 sorts)
        tuples = lambda name: [tuple(d[f] for f in fields[name]) for d in row[name]]  # noqa: E731
        rec = {"caption": row["caption"], **{name: tuples(name) for name in ("noun_phrases", "pos", "keywords") if name in row}}
        if "graph_nodes" in row:
            rec["graph"] = {"nodes": tuples("graph_nodes"), "edges": tuples("graph_edges")}
        return rec

    segment = part_folder(out, 0, 1)
    old = sorted(out.glob("part-*.parquet"))
    for n, path in enumerate(old):
        rows = [to_row(bytes.fromhex(row["key"]), record(row)) for row in pq.read_table(path).to_pylist()]
        write_shard(segment / f"shard-{n:05d}.arrow", rows)
    write_json(out / MANIFEST, {"format": FORMAT, "config": manifest["config"]})
    for path in old:
        path.unlink()


def _remove_damaged(segment: Path) -> int:
    """Remove this part's shards that do not read (a disk that filled, a copy cut short), saying which: their captions are
    parsed again by this run, the rest kept."""
    removed = 0
    for path in sorted(segment.glob("shard-*.arrow")):
        try:
            shard_keys(path)
        except DataError as e:
            log.warning("%s; removed it, its captions are parsed again", str(e).split(";")[0])
            path.unlink()
            removed += 1
    return removed


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
    part: tuple[int, int] = (0, 1),
) -> tuple[ConceptStore | None, dict[str, Any]]:
    """Extract concepts for every caption of part `part` = (i, n) not yet in the store at `out`.

    Returns the store, once every part of `n` is done and indexed (else None: stats say which
    parts are missing), and the run's counts. `captions` streams; workers are processes, each
    with its own spaCy pipeline.
    """
    fields = parse_what(what)
    out = Path(out)
    if workers < 1 or shard_size < 1:
        raise UsageError(f"--workers and --shard-size must be at least 1, not {workers} and {shard_size}")
    nlp = load_nlp() if PARSED & set(fields) else None
    config = config_for(fields, with_prep, nlp)
    _start(out, config)
    segment = part_folder(out, *part)
    refuse_links(segment.parent, (segment.name,))  # this part's damaged and unfinished shards are removed
    with FolderLock(segment / LOCK_NAME, f"another compclip concepts run of part {part[0]}/{part[1]}"):
        stats = _fill_part(captions, out, segment, config, nlp, fields, with_prep, workers, batch_size, shard_size, total, part)
    if stats["missing_parts"]:
        return None, stats
    with FolderLock(out / INDEX_LOCK_NAME, "another part writing the index", wait=True):  # parts may finish together
        stats["records"] = write_index(out)
    return ConceptStore(out), stats


def _fill_part(captions: Iterable[Any], out: Path, segment: Path, config: dict[str, Any], nlp: Any, fields: tuple[str, ...],
               with_prep: bool, workers: int, batch_size: int, shard_size: int, total: int | None,
               part: tuple[int, int]) -> dict[str, Any]:
    """Parse and write this part's captions that the store lacks, holding the part's lock; the run's counts."""
    for stale in segment.glob(".shard-*.tmp"):  # a killed run's unfinished shard
        stale.unlink()
    (segment / DONE).unlink(missing_ok=True)
    repaired = _remove_damaged(segment)
    if repaired:  # the index still lists the removed shards' captions as done: built again at the end
        (out / INDEX).unlink(missing_ok=True)
    done = _Done(out, segment)
    next_shard = 1 + max((int(p.stem.split("-")[1]) for p in segment.glob("shard-*.arrow")), default=-1)
    stats = {"captions": 0, "other_parts": 0, "parsed": 0, "cached_records": done.cached, "shards_written": 0, "repaired_shards": repaired}

    def counted(items: Iterable[Any]) -> Iterator[Any]:
        for item in items:
            stats["captions"] += 1
            yield item

    start = time.perf_counter()
    bar = progress(counted(captions), "concepts", total=total, unit="caption")
    tasks = ((keys, chunk, fields, with_prep, batch_size) for keys, chunk in _chunks(bar, config, done, part, stats, CHUNK))
    _WORKER["nlp"] = nlp  # forked workers inherit the loaded pipeline: no reload
    pool = stops.pool(workers) if workers > 1 else None
    results = pool.imap(_work, tasks) if pool is not None else map(_work, tasks)
    rows: list[dict[str, Any]] = []
    try:
        for chunk_rows in results:
            rows.extend(chunk_rows)
            stats["parsed"] += len(chunk_rows)
            while len(rows) >= shard_size:
                write_shard(segment / f"shard-{next_shard:05d}.arrow", rows[:shard_size])
                rows, next_shard, stats["shards_written"] = rows[shard_size:], next_shard + 1, stats["shards_written"] + 1
        if rows:
            write_shard(segment / f"shard-{next_shard:05d}.arrow", rows)
            stats["shards_written"] += 1
    finally:
        stops.end_pool(pool)
        _WORKER.clear()
    write_json(segment / DONE, {"part": list(part), **stats})
    stats["seconds"] = time.perf_counter() - start
    stats["captions_per_s"] = stats["captions"] / stats["seconds"] if stats["seconds"] else float("inf")
    stats["missing_parts"] = [i for i in range(part[1]) if not (part_folder(out, i, part[1]) / DONE).is_file()]
    return stats
