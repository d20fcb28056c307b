"""The concept store read in place: parts, the key index, format versions, and reading in DataLoader workers."""
import hashlib
import json
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from compclip.concepts import ConceptStore, build_store, extract, iter_captions, load_nlp, parse_part
from compclip.concepts.store import to_row, write_index, write_shard
from compclip.errors import DataError, UsageError
from conftest import shared_data

WHAT = "noun-phrases,pos,graph,keywords"


@pytest.fixture(scope="module")
def captions():
    every = list(iter_captions(shared_data("coco", "captions_val2017.json")))
    return every[:500] + every[:100]  # repeats are stored once


@pytest.fixture(scope="module")
def expected(captions):
    return extract(captions, WHAT, nlp=load_nlp())


def test_parts_combine_to_the_records_of_one_run(tmp_path, captions, expected):
    one, stats = build_store(captions, tmp_path / "one", WHAT, shard_size=64)
    assert stats["missing_parts"] == [] and len(one) == len(set(captions)) == stats["records"]
    for i in (2, 0):
        store, stats = build_store(captions, tmp_path / "three", WHAT, shard_size=64, part=(i, 3))
        assert store is None and 1 in stats["missing_parts"]
    three, stats = build_store(captions, tmp_path / "three", WHAT, shard_size=64, part=(1, 3))
    assert stats["missing_parts"] == [] and len(three) == len(one)
    assert [one[c] for c in captions] == [three[c] for c in captions] == expected
    folders = sorted((tmp_path / "three" / "parts").iterdir())
    assert [f.name for f in folders] == ["0-of-3", "1-of-3", "2-of-3"]
    per_part = [pa.ipc.open_file(str(p)).read_all().column("caption").to_pylist() for f in folders for p in sorted(f.glob("*.arrow"))]
    stored = [c for part in per_part for c in part]
    assert len(stored) == len(set(stored)) == len(set(captions)), "each caption lives in exactly one part"


def test_part_spec_and_slurm_array(tmp_path):
    assert parse_part("3/8") == (3, 8)
    assert parse_part(None, {}) == (0, 1)
    assert parse_part(None, {"SLURM_ARRAY_TASK_ID": "12", "SLURM_ARRAY_TASK_MIN": "10", "SLURM_ARRAY_TASK_COUNT": "4"}) == (2, 4)
    for bad in ("8/8", "1-4", "x/2"):
        with pytest.raises(UsageError, match="--part"):
            parse_part(bad)


def _handmade_store(folder, keys_by_part):
    """A store whose keys are chosen by hand: records named after their part and position."""
    config = {"pipeline": "hand", "what": ["noun_phrases"], "with_prep": False}
    (folder / "manifest.json").parent.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"format": 2, "config": config}))
    for part, keys in enumerate(keys_by_part):
        rows = [to_row(k, {"caption": f"part {part} row {r}", "noun_phrases": [("row", 7, 10)]}) for r, k in enumerate(keys)]
        write_shard(folder / "parts" / f"{part}-of-{len(keys_by_part)}" / "shard-00000.arrow", rows)
    return write_index(folder)


def test_the_index_resolves_shared_prefixes_and_keeps_the_first_of_a_repeated_key(tmp_path):
    prefix = bytes(range(8))
    a, b, c = prefix + b"A" * 8, prefix + b"B" * 8, prefix + b"C" * 8
    rng = np.random.default_rng(0)
    others = [rng.bytes(16) for _ in range(200)]
    assert _handmade_store(tmp_path / "s", [[b, *others[:100]], [a, *others[100:], b]]) == 202
    store = ConceptStore(tmp_path / "s")
    def found(*keys):
        hit, shard, row = store._locate(list(keys))
        return [store._shard(s).record(r)["caption"] if h else None for h, s, r in zip(hit, shard, row, strict=True)]

    assert found(a, b, c, prefix[:7] + b"\xff" + b"A" * 8) == ["part 1 row 0", "part 0 row 0", None, None]
    assert found(*others[:3]) == ["part 0 row 1", "part 0 row 2", "part 0 row 3"]
    for key in (a, b, c, *others[:50]):  # one at a time, the scalar path
        hit = store._find(key)
        assert found(key) == [None if hit is None else store._shard(hit[0]).record(hit[1])["caption"]]
    probe = [a, c, *others[::7], rng.bytes(16)]
    assert store.contains_keys(probe).tolist() == [k in {a, b, *others} for k in probe]


def test_a_store_of_the_previous_format_is_refused_then_upgraded_without_parsing(tmp_path, captions, expected):
    """Format 1 as compclip wrote it: Parquet shards, hex keys, a manifest without a format number."""
    store, _ = build_store(captions, tmp_path / "new", WHAT)
    old = tmp_path / "old"
    old.mkdir()
    config = store.config
    salt = f"{config['pipeline']}|{','.join(config['what'])}|prep={config['with_prep']}|"
    spans = lambda items: [{"text": t, "start": a, "end": b} for t, a, b in items]  # noqa: E731
    rows = [{  # format 1's row: nested columns
        "key": hashlib.blake2b((salt + rec["caption"]).encode(), digest_size=16).hexdigest(), "caption": rec["caption"],
        "noun_phrases": spans(rec["noun_phrases"]), "pos": [{"text": t, "start": a, "end": b, "pos": p} for t, a, b, p in rec["pos"]],
        "graph_nodes": spans(rec["graph"]["nodes"]),
        "graph_edges": [{"relation": r, "subject": a, "object": b} for r, a, b in rec["graph"]["edges"]],
        "keywords": [{"class": c, "keyword": k, "start": a, "end": b} for c, k, a, b in rec["keywords"]],
    } for rec in {r["caption"]: r for r in expected}.values()]
    assert all(bytes.fromhex(row["key"]) == store.key(row["caption"]) for row in rows)
    pq.write_table(pa.Table.from_pylist(rows[:300]), old / "part-00000.parquet")
    pq.write_table(pa.Table.from_pylist(rows[300:]), old / "part-00001.parquet")
    (old / "manifest.json").write_text(json.dumps({"config": config}))
    with pytest.raises(DataError, match=r"format 1; this compclip reads format 2: .*`compclip concepts CAPTIONS --out .*old`"):
        ConceptStore(old)
    upgraded, stats = build_store(captions, old, WHAT)
    assert stats["parsed"] == 0 and not list(old.glob("*.parquet"))
    assert [upgraded[c] for c in captions] == expected
    (old / "manifest.json").write_text(json.dumps({"format": 3, "config": config}))
    with pytest.raises(DataError, match=r"format 3.*newer compclip"):
        ConceptStore(old)


class _Lookups(torch.utils.data.IterableDataset):
    def __init__(self, store, captions):
        self.store, self.captions = store, captions

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        yield from ((c, self.store.get(c)) for c in self.captions[info.id :: info.num_workers])


def _as_is(item):
    return item


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_read_the_store_in_place(tmp_path, captions, expected, context):
    store, _ = build_store(captions, tmp_path / "s", WHAT)
    clone = pickle.loads(pickle.dumps(store))
    assert len(pickle.dumps(store)) < 1000, "a worker gets the folder, not the records"
    assert [clone[c] for c in captions[:50]] == expected[:50]
    loader = torch.utils.data.DataLoader(_Lookups(store, captions), batch_size=None, num_workers=2,
                                         multiprocessing_context=context, collate_fn=_as_is)
    by_caption = dict(zip(captions, expected, strict=True))
    seen = list(loader)
    assert len(seen) == len(captions) and all(rec == by_caption[c] for c, rec in seen)


def flickr_shards(folder, n=24, per_shard=12):
    """Real Flickr8k photos in webdataset shards, captions as `txt` (odd keys) or `json` (even keys)."""
    import csv

    import webdataset as wds

    with open(shared_data("flickr8k_1k", "captions.csv"), newline="") as f:
        rows = list(csv.DictReader(f))[: n * 5 : 5]
    folder.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(folder / "in-%02d.tar"), maxcount=per_shard, verbose=0) as sink:
        for i, row in enumerate(rows):
            text = {"txt": row["caption"].encode()} if i % 2 else {"json": json.dumps({"caption": row["caption"], "id": i}).encode()}
            sink.write({"__key__": f"{i:05d}", "jpg": (shared_data("flickr8k_1k", "images") / row["image"]).read_bytes(), **text})
    return str(folder / "in-{00..01}.tar"), [r["caption"] for r in rows]


def tar_members(path):
    import tarfile

    with tarfile.open(path) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar]


def compclip_main(*args):
    from compclip.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    assert exit_.value.code == 0


def test_concepts_travel_in_copies_of_the_shards(tmp_path):
    from compclip.data import WebDatasetReader

    shards, captions = flickr_shards(tmp_path / "in")
    out = tmp_path / "out"
    compclip_main("-q", "concepts", shards, "--into-shards", str(out), "--what", "noun-phrases,pos", "--workers", "2")
    for name in ("in-00.tar", "in-01.tar"):
        original, copy = tar_members(tmp_path / "in" / name), tar_members(out / name)
        assert [m for m in copy if not m[0].endswith(".concepts.json")] == original, "every member kept, byte for byte"
        assert [n for n, _ in copy][2::3] == [f"{n.split('.')[0]}.concepts.json" for n, _ in original[::2]], "one record after each sample"
    reader = WebDatasetReader(str(out / "in-{00..01}.tar"))
    assert reader.concept_fields() == ("noun_phrases", "pos")
    samples = list(reader)
    assert [s["caption"] for s in samples] == [c.strip() for c in captions]
    assert [s["concepts"] for s in samples] == extract([s["caption"] for s in samples], "noun-phrases,pos")
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    compclip_main("-q", "concepts", shards, "--into-shards", str(out), "--what", "noun-phrases,pos")
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before, "finished shards are kept"


def test_in_shard_concepts_give_the_same_batches_as_the_store(tmp_path):
    from compclip.concepts import shards_with_concepts
    from compclip.train import TrainConfig, Trainer

    shards, _ = flickr_shards(tmp_path / "in")
    build_store(iter_captions(shards), tmp_path / "store", "noun-phrases,pos")
    shards_with_concepts(shards, tmp_path / "out", "noun-phrases,pos")
    common = {"method": "c2lip+negclip", "model": "compclip-tiny-siglip", "batch_size": 8, "workers": 0, "steps": 1}
    with_store = Trainer(TrainConfig(train_data=shards, concepts=str(tmp_path / "store"), out=str(tmp_path / "a"), **common))
    carried = Trainer(TrainConfig(train_data=str(tmp_path / "out" / "in-{00..01}.tar"), out=str(tmp_path / "b"), **common))
    for a, b in zip(with_store._batches(), carried._batches(), strict=False):
        assert a.keys() == b.keys() and {"concept_span", "negative_text"} <= a.keys()
        for key in a:
            assert torch.equal(a[key], b[key]) if isinstance(a[key], torch.Tensor) else a[key] == b[key], key
        if carried.data.batches == 3:
            break
    with pytest.raises(UsageError, match="--into-shards"):
        Trainer(TrainConfig(train_data=shards, out=str(tmp_path / "c"), **common))
