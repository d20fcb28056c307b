"""The whole input path in samples/s per DataLoader worker: compclip's reader with concepts vs open_clip's webdataset pipeline.

    python benchmarks/input_path.py --workers 1,2

Both read the same webdataset shards of the 1,000 real Flickr8k photos (first caption each),
decode with PIL, apply the same open_clip training transform (ViT-B-16, 224 px, random resized
crop) and the same CLIP tokenizer, and batch. compclip's side is what `compclip train` runs for
C2LIP: `WebDatasetReader` and the method's collate, which also looks every caption up in a
concept store and maps its noun phrases to token spans; a second row reads the concepts from the
shards themselves (`compclip concepts --into-shards`). open_clip's side is
`open_clip_train.data.get_wds_dataset` (its shard and sample shuffles included; its tar reader
swapped for webdataset's own, which open_clip_train 3.3 cannot pair with webdataset 1.0). Each
configuration runs twice after a warm-up pass; the faster pass counts.
"""
from __future__ import annotations

import argparse
import csv
import json
import shutil
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import open_clip
import torch
import webdataset as wds

from compclip.concepts import build_store, shards_with_concepts
from compclip.data import WebDatasetReader
from compclip.methods import build_method

FLICKR = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k_1k"


def write_shards(folder: Path, per_shard: int) -> tuple[str, list[str]]:
    with open(FLICKR / "captions.csv", newline="") as f:
        first = {}
        for row in csv.DictReader(f):
            first.setdefault(row["image"], row["caption"])
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with wds.ShardWriter(str(folder / "flickr-%03d.tar"), maxcount=per_shard, verbose=0) as sink:
        for i, (name, caption) in enumerate(first.items()):
            sink.write({"__key__": f"{i:06d}", "jpg": (FLICKR / "images" / name).read_bytes(), "txt": caption.encode()})
    count = -(-len(first) // per_shard)
    return str(folder / f"flickr-{{000..{count - 1:03d}}}.tar"), [c.strip() for c in first.values()]


class Collate:
    def __init__(self, method, tokenizer):
        self.method, self.tokenizer = method, tokenizer

    def __call__(self, samples):
        return self.method.collate(samples, self.tokenizer)


def compclip_pass(shards: str, preprocess, tokenizer, method, workers: int, batch: int) -> tuple[int, float]:
    reader = WebDatasetReader(shards, transform=preprocess)
    loader = torch.utils.data.DataLoader(reader, batch_size=batch, num_workers=workers, collate_fn=Collate(method, tokenizer),
                                         drop_last=True, persistent_workers=False)
    start, seen = time.perf_counter(), 0
    for b in loader:
        seen += len(b["caption"])
        assert "concept_span" in b
    return seen, time.perf_counter() - start


def open_clip_pass(shards: str, preprocess, tokenizer, workers: int, batch: int, samples: int) -> tuple[int, float]:
    import open_clip_train.data as open_clip_data

    # open_clip_train 3.3's own tar reader expects webdataset < 1.0's sample dicts ("fname"); webdataset's
    # stage with open_clip's handler is the same step for this webdataset
    open_clip_data.tarfile_to_samples_nothrow = wds.tarfile_to_samples(handler=open_clip_data.log_and_continue)
    args = SimpleNamespace(train_data=shards, train_num_samples=samples, batch_size=batch, workers=workers, seed=0, world_size=1,
                           train_data_upsampling_factors=None, val_data=None, val_num_samples=None, dataset_resampled=False)
    loader = open_clip_data.get_wds_dataset(args, preprocess, is_train=True, tokenizer=tokenizer).dataloader
    start, seen = time.perf_counter(), 0
    for images, _ in loader:
        seen += images.shape[0]
    return seen, time.perf_counter() - start


def best_rate(run, repeats: int) -> float:
    run()  # warm-up: page cache, worker start-up paths
    rates = []
    for _ in range(repeats):
        seen, seconds = run()
        rates.append(seen / seconds)
    return max(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--per-shard", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--root", default="/tmp/compclip-input-path")
    args = parser.parse_args()
    root = Path(args.root)
    shards, captions = write_shards(root / "shards", args.per_shard)
    store, _ = build_store(captions, root / "store", "noun-phrases")
    shards_with_concepts(shards, root / "with-concepts", "noun-phrases", workers=2)
    carried = str(root / "with-concepts" / Path(shards).name)
    _, _, preprocess = open_clip.create_model_and_transforms("ViT-B-16", pretrained=None)
    tokenizer = open_clip.get_tokenizer("ViT-B-16")
    with_store, in_shards = build_method("c2lip", concepts=store), build_method("c2lip")
    for workers in [int(w) for w in args.workers.split(",")]:
        runs = {
            "compclip_store": partial(compclip_pass, shards, preprocess, tokenizer, with_store, workers, args.batch),
            "compclip_in_shards": partial(compclip_pass, carried, preprocess, tokenizer, in_shards, workers, args.batch),
            "open_clip": partial(open_clip_pass, shards, preprocess, tokenizer, workers, args.batch, len(captions)),
        }
        rates = {name: best_rate(run, args.repeats) for name, run in runs.items()}
        row = {"workers": workers, **{f"{k}_per_worker": round(v / workers, 1) for k, v in rates.items()},
               "ratio_store": round(rates["compclip_store"] / rates["open_clip"], 3),
               "ratio_in_shards": round(rates["compclip_in_shards"] / rates["open_clip"], 3)}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
