"""Each record's nearest neighbours by image embedding, for NegCLIP's hard-negative images (`negclip --method-opt
hard_images=neighbours`): `compclip neighbours DATA.jsonl --model M --out OUT.jsonl` writes DATA's records with a list of
record indices each, the data field the method reads.

NegCLIP's released training file lists each row's hard-negative rows (`neg_image`, three a row in its validation file),
but the released code does not say how they were found. This computes them one plain way: the cosine similarity of
the model's image embeddings (its evaluation view), each record's `k` most similar records of other images, most
similar first. A caption file lists a photo once a caption (five a photo in COCO and Flickr), and its own photo is
always its nearest: a record's own image, under its path or as the same bytes under another, is never its neighbour.
A record whose image cannot be read has no embedding: it is no one's neighbour, and its own list is empty (a bad record
when training, skipped and counted).
"""
from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .errors import DataError, UsageError
from .io import sha256_of

CHUNK = 1024  # rows of the similarity matrix at once: 4 MiB a thousand records, never the whole N × N


def nearest_neighbours(features: torch.Tensor, k: int = 3, images: Sequence[int] | None = None, *, chunk: int = CHUNK) -> torch.Tensor:
    """(N, k) indices of each row's `k` most cosine-similar rows of `features` (N, D), most similar first, never a row of
    its own image: `images` numbers the image each row shows (default: each row its own), so that the other captions of
    a row's photo, the same embedding, are not its neighbours. `chunk` rows of the similarity matrix are held at once."""
    own = torch.arange(features.shape[0]) if images is None else torch.as_tensor(images, dtype=torch.long)
    others = features.shape[0] - int(torch.bincount(own)[own].max())  # the fewest rows of other images any row has
    if others < 1:
        raise UsageError(f"the {features.shape[0]} records show one image: none has a neighbour of another image")
    if not 0 < k <= others:
        raise UsageError(f"--k must be 1 to {others} (the fewest records of other images than a record's own), not {k}")
    x = F.normalize(features.float(), dim=-1)
    found = []
    for start in range(0, x.shape[0], chunk):
        sims = x[start : start + chunk] @ x.T
        sims[own[start : start + chunk, None] == own[None, :]] = float("-inf")  # never itself, nor its image's other records
        found.append(sims.topk(k, dim=1).indices)
    return torch.cat(found)


def image_numbers(images: Sequence[tuple[str, Path]]) -> list[int]:
    """A number for each (record, image path) of `images`, the same for paths that hold one image: one file under two
    names (a link) by its real path, a copy under another name by its bytes' sha256, read where two files have one size."""
    real = [os.path.realpath(path) for _, path in images]
    sizes = {file: _size(where, file) for (where, _), file in zip(images, real, strict=True)}
    files_of_size = Counter(sizes.values())
    identity = {file: ("sha256", sha256_of(file)) if files_of_size[size] > 1 else ("file", file) for file, size in sizes.items()}
    numbers: dict[tuple[str, str], int] = {}
    return [numbers.setdefault(identity[file], len(numbers)) for file in real]


def _size(where: str, file: str) -> int:
    """`file`'s size; a file gone since its image was read is named with its record."""
    try:
        return os.stat(file).st_size
    except OSError as e:
        raise DataError(f"{where}: {file}: {e.strerror}, after its image was read") from None


def write_neighbours(data: str | Path, out: str | Path, model: str, pretrained: str | None = None, *, k: int = 3,
                     key: str = "neighbours", image_key: str = "image", caption_key: str = "caption",
                     image_root: str | Path | None = None, batch_size: int = 64, device: str = "cpu") -> dict[str, Any]:
    """`out`: the JSON lines `data` with each record's `k` nearest neighbours of other images (`nearest_neighbours` of
    `model`'s image embeddings, `image_numbers` telling the images apart) under `key`, index i naming the i-th record as
    the reader counts them (blank lines not counted). Returns the counts: records, embedded, without an image."""
    from .data import open_reader
    from .data.readers import json_lines
    from .io import atomic_path
    from .models import load_model

    data, out = Path(data), Path(out)
    if data.suffix.lower() != ".jsonl":
        raise UsageError(f"{data}: neighbours are written into JSON lines (.jsonl), the records that carry them when training")
    if out.resolve() == data.resolve():
        raise UsageError(f"--out {out} is the data file itself: write the records with their neighbours to another file")
    net, preprocess, _ = load_model(model, pretrained, device=device)
    reader = open_reader(data, preprocess, image_key=image_key, caption_key=caption_key, image_root=image_root)
    total = reader.num_records()
    records = [reader.record_at(i)[:2] for i in range(total)]  # (where "FILE:LINE", image path)
    index = {where: i for i, (where, _) in enumerate(records)}
    rows, features = [], []
    batches = torch.utils.data.DataLoader(reader, batch_size=batch_size, collate_fn=lambda s: s)
    with torch.no_grad():
        for samples in batches:
            rows += [index[s["key"]] for s in samples]
            features.append(net.encode_image(torch.stack([s["image"] for s in samples]).to(device)).cpu())
    if len(rows) < 2:
        raise UsageError(f"{data}: {len(rows)} of its {total} records has an image that reads: no neighbours to find")
    found = nearest_neighbours(torch.cat(features), k, image_numbers([records[row] for row in rows]))
    lists = {row: [rows[j] for j in near] for row, near in zip(rows, found.tolist(), strict=True)}
    with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for i, (_, value) in enumerate(json_lines(data)):
            if isinstance(value, dict):
                value = {**value, key: lists.get(i, [])}
            f.write((json.dumps(value, ensure_ascii=False) if not isinstance(value, Exception) else value.doc.rstrip("\n")) + "\n")
    return {"records": total, "embedded": len(rows), "without_image": total - len(rows)}
