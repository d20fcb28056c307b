"""Concepts that travel with the data: copies of webdataset shards with a `concepts.json` member per sample.

For users who prefer one artefact to two: the trainer reads a sample's record from the sample
(`compclip.data.WebDatasetReader`) and needs no store. Each output shard is written atomically,
so a killed run resumes at the first shard not yet written.
"""
from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from .. import stops
from ..data.formats.webdataset_shards import tar_members
from ..errors import UsageError
from ..io import atomic_path
from .pipeline import PARSED, extract, load_nlp, parse_what

BATCH = 256  # samples parsed together
_WORKER: dict[str, Any] = {}


class SampleConcepts:
    """The concept source of a run whose samples carry their records: nothing to look up, fields to check."""

    def __init__(self, what: Iterable[str], source: str):
        self.what, self.folder = tuple(what), source

    def get(self, caption: Any) -> None:
        return None


def _samples(members: Iterable[tuple[tarfile.TarInfo, Callable[[], bytes | None]]]
             ) -> Iterator[tuple[str, list[tuple[tarfile.TarInfo, bytes | None]]]]:
    """Consecutive members grouped by key (webdataset's rule: the name up to the first dot of its file name), with their
    bytes: each member read once the samples before it are handed on."""
    key, group = None, []
    for info, read in members:
        folder, _, base = info.name.rpartition("/")
        stem = base.partition(".")[0]
        this = f"{folder}/{stem}" if folder else stem
        if group and this != key:
            yield key, group
            group = []
        key = this
        group.append((info, read()))
    if group:
        yield key, group


def _caption(members: list[tuple[tarfile.TarInfo, bytes | None]], caption_key: str) -> Any:
    from ..data.formats.webdataset_shards import sample_caption

    sample = {info.name.rpartition("/")[2].partition(".")[2].lower(): data for info, data in members if data is not None}
    try:
        caption = sample_caption(sample, caption_key)
    except json.JSONDecodeError:
        return None
    return caption.strip() if isinstance(caption, str) else caption


def _copy_shard(task: tuple[str, Path, tuple[str, ...], bool, str]) -> tuple[str, int, list[str], str | None]:
    """(shard, samples written, where it was damaged, why it could not be copied or None). A shard cut off is not copied:
    its partial copy is never written, and the other shards go on."""
    url, dest, what, with_prep, caption_key = task
    damaged: list[str] = []
    try:
        return url, _copy(url, dest, what, with_prep, caption_key, damaged.append), damaged, None
    except (tarfile.TarError, OSError) as e:
        return url, 0, damaged, f"{type(e).__name__}: {e}"


def _copy(url: str, dest: Path, what: tuple[str, ...], with_prep: bool, caption_key: str, damaged) -> int:
    written = 0
    with atomic_path(dest) as tmp, tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as sink:
        def flush(group: list[tuple[str, list]]) -> None:
            captions = [_caption(members, caption_key) for _, members in group]
            for (key, members), record in zip(group, extract(captions, what, with_prep=with_prep, nlp=_WORKER.get("nlp")), strict=True):
                for info, data in members:
                    sink.addfile(info, io.BytesIO(data) if data is not None else None)
                payload = json.dumps(record, ensure_ascii=False).encode("utf-8")
                info = tarfile.TarInfo(f"{key}.concepts.json")
                info.size, info.mtime, info.mode = len(payload), members[0][0].mtime, 0o644
                sink.addfile(info, io.BytesIO(payload))

        group: list[tuple[str, list]] = []
        for sample in _samples(tar_members(url, damaged)):
            group.append(sample)
            if len(group) == BATCH:
                flush(group)
                written, group = written + len(group), []
        flush(group)
        written += len(group)
    return written


def shards_with_concepts(
    urls: str, out: str | Path, what: str | Iterable[str] = ("noun_phrases",), *,
    with_prep: bool = False, workers: int = 1, caption_key: str = "caption",
) -> dict[str, Any]:
    """Copy each shard of `urls` into `out` (same file name) with a `<key>.concepts.json` member after each
    sample's own members; shards already in `out` are kept. Workers are processes, one shard each at a time. The
    stats name each shard with a damaged header (`damaged`: where; the copy holds the rest) and each that could not be
    copied (`failed`: why, e.g. cut off; no copy written)."""
    import webdataset as wds

    fields = parse_what(what)
    paths = wds.shardlists.expand_urls(urls)
    names = [Path(u).name for u in paths]
    if len(set(names)) != len(names):
        raise UsageError(f"{urls}: two shards share a file name; --into-shards keeps the names, so they would collide")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob(".*.tmp"):  # a killed run's unfinished copy
        stale.unlink()
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, not {workers}")
    todo = [(u, out / n, fields, with_prep, caption_key) for u, n in zip(paths, names, strict=True) if not (out / n).exists()]
    stats: dict[str, Any] = {"shards_written": 0, "skipped_shards": len(paths) - len(todo), "samples": 0, "damaged": {}, "failed": {}}
    _WORKER["nlp"] = load_nlp() if PARSED & set(fields) else None  # forked workers inherit it
    pool = stops.pool(min(workers, len(todo))) if workers > 1 and len(todo) > 1 else None
    try:
        for url, samples, damaged, failed in (pool.imap_unordered(_copy_shard, todo) if pool is not None else map(_copy_shard, todo)):
            if damaged:
                stats["damaged"][url] = damaged
            if failed:
                stats["failed"][url] = failed
                continue
            stats["shards_written"] += 1
            stats["samples"] += samples
    finally:
        stops.end_pool(pool)
        _WORKER.clear()
    return stats
