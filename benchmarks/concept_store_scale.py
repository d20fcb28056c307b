"""Concept store at 30 k, 300 k and 3 M captions: open time, private memory and lookups/s per DataLoader worker.

    python benchmarks/concept_store_scale.py --sizes 30000,300000,3000000

Captions are COCO val2017's with seeded word substitutions (two words replaced from COCO's own
vocabulary), all distinct. Records hold noun phrases only and are made by a fast synthetic
writer (a regex chunker: a determiner or number and up to three words), not spaCy, so that 3 M
records build in minutes; the store's code path from the shard on is the one `compclip concepts`
writes. Each size is read by two DataLoader workers at once (fork, as torch does on Linux), each
looking up its own random captions; a worker reports the private memory it added (from
/proc/self/smaps_rollup: USS = Private_Clean + Private_Dirty, and the anonymous part alone).
The peer, at the sizes where it fits, is what format 1 did: every record read into a dict.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

from compclip.concepts import ConceptStore, iter_captions
from compclip.concepts.store import caption_key, record_from_json, to_row, write_index, write_shard
from compclip.io import write_json

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
CHUNKER = re.compile(r"\b(?:a|an|the|two|three|four|some|several|many|one|his|her|their)\b(?:\s+[A-Za-z]+){1,3}", re.I)
CONFIG = {"pipeline": "synthetic-regex-chunker", "what": ["noun_phrases"], "with_prep": False}
SHARD = 20_000


def captions(n: int, seed: int = 0) -> list[str]:
    base = [c for c in iter_captions(SHARED / "coco" / "captions_val2017.json") if isinstance(c, str) and c.strip()]
    vocab = sorted({w for c in base for w in c.lower().split() if w.isalpha()})
    rng = random.Random(seed)
    out, seen = [], set()
    i = 0
    while len(out) < n:
        words = base[i % len(base)].split()
        i += 1
        for _ in range(2):
            words[rng.randrange(len(words))] = rng.choice(vocab)
        text = " ".join(words)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def record(caption: str) -> dict:
    return {"caption": caption, "noun_phrases": [(m.group(), m.start(), m.end()) for m in CHUNKER.finditer(caption)]}


def build(folder: Path, texts: list[str]) -> float:
    start = time.perf_counter()
    shutil.rmtree(folder, ignore_errors=True)
    write_json(folder / "manifest.json", {"format": 2, "config": CONFIG})
    for s in range(0, len(texts), SHARD):
        rows = [to_row(caption_key(CONFIG, c), record(c)) for c in texts[s : s + SHARD]]
        write_shard(folder / "parts" / "0-of-1" / f"shard-{s // SHARD:05d}.arrow", rows)
    write_index(folder)
    return time.perf_counter() - start


def private_kib() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        name, _, value = line.partition(":")
        if value.strip().endswith("kB"):
            fields[name] = int(value.split()[0])
    return {"uss": fields["Private_Clean"] + fields["Private_Dirty"], "anon": fields["Private_Dirty"]}


class Lookups(torch.utils.data.IterableDataset):
    """Each worker opens the store itself (as a pickled store does), then looks up its share of `probe` a batch
    at a time (as the trainer's collate does), then a tenth of it one caption at a time (`store.get`)."""

    def __init__(self, folder: Path, probe: list[str], batch: int):
        self.folder, self.probe, self.batch = folder, probe, batch

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        mine = self.probe[info.id :: info.num_workers]
        before = private_kib()
        t = time.perf_counter()
        store = ConceptStore(self.folder)
        opened = time.perf_counter() - t
        t = time.perf_counter()
        found = sum(r is not None for i in range(0, len(mine), self.batch) for r in store.get_many(mine[i : i + self.batch]))
        seconds = time.perf_counter() - t
        after = private_kib()
        single = mine[: len(mine) // 10]
        t = time.perf_counter()
        found_single = sum(store.get(c) is not None for c in single)
        single_s = time.perf_counter() - t
        yield {"worker": info.id, "open_s": opened, "lookups": len(mine) + len(single), "found": found + found_single,
               "lookups_per_s": len(mine) / seconds, "single_per_s": len(single) / single_s,
               "uss_added_mib": (after["uss"] - before["uss"]) / 1024, "anon_added_mib": (after["anon"] - before["anon"]) / 1024}


def dict_peer(folder: Path, probe: list[str]) -> dict[str, float]:
    """Format 1's reading: every record decoded into one dict keyed by caption hash (in this process, measured the same way)."""
    import pyarrow as pa

    before = private_kib()
    t = time.perf_counter()
    records = {}
    for path in sorted((folder / "parts").glob("*/*.arrow")):
        for row in pa.ipc.open_file(str(path)).read_all().to_pylist():
            records[row["key"]] = record_from_json({"caption": row["caption"], **json.loads(row["concepts"])})
    opened = time.perf_counter() - t
    t = time.perf_counter()
    found = sum(caption_key(CONFIG, c) in records for c in probe)
    seconds = time.perf_counter() - t
    assert found == len(probe)
    return {"open_s": opened, "lookups_per_s": len(probe) / seconds, "uss_added_mib": (private_kib()["uss"] - before["uss"]) / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="30000,300000,3000000")
    parser.add_argument("--lookups", type=int, default=200_000, help="random lookups per size, split over the workers")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=128, help="captions per lookup call, as one training batch")
    parser.add_argument("--peer-up-to", type=int, default=300_000, help="largest size at which to load the dict peer")
    parser.add_argument("--root", default="/tmp/compclip-store-scale")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    texts = captions(max(sizes))
    rows = []
    for n in sizes:
        folder = Path(args.root) / f"store-{n}"
        built = build(folder, texts[:n])
        disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        opens = []
        for _ in range(5):
            t = time.perf_counter()
            ConceptStore(folder)
            opens.append(time.perf_counter() - t)
        probe = random.Random(n).choices(texts[:n], k=args.lookups)
        loader = torch.utils.data.DataLoader(Lookups(folder, probe, args.batch), batch_size=None, num_workers=args.workers,
                                             collate_fn=lambda x: x)
        workers = list(loader)
        assert all(w["found"] == w["lookups"] for w in workers)
        row = {
            "records": n, "build_s": round(built, 1), "bytes_per_record": round(disk / n, 1),
            "open_ms_median": round(1000 * float(np.median(opens)), 2),
            "worker_open_ms": round(1000 * max(w["open_s"] for w in workers), 2),
            "lookups_per_s_per_worker": round(min(w["lookups_per_s"] for w in workers)),
            "single_gets_per_s_per_worker": round(min(w["single_per_s"] for w in workers)),
            "uss_added_mib_per_worker": round(max(w["uss_added_mib"] for w in workers), 1),
            "anon_added_mib_per_worker": round(max(w["anon_added_mib"] for w in workers), 1),
        }
        if n <= args.peer_up_to:
            peer = dict_peer(folder, probe[:20_000])
            row.update({"peer_open_s": round(peer["open_s"], 2), "peer_uss_added_mib": round(peer["uss_added_mib"], 1),
                        "open_speedup": round(peer["open_s"] / (row["open_ms_median"] / 1000)),
                        "memory_ratio": round(peer["uss_added_mib"] / max(row["uss_added_mib_per_worker"], 0.1), 1)})
        rows.append(row)
        print(json.dumps(row), flush=True)
    flat = rows[-1]["lookups_per_s_per_worker"] / rows[0]["lookups_per_s_per_worker"]
    last = f"{sizes[-1]:,}"
    print(f"lookups/s at {last} vs {sizes[0]:,}: {flat:.2f}x; open at {last}: {rows[-1]['open_ms_median']} ms", file=sys.stderr)


if __name__ == "__main__":
    main()
