"""Each record's nearest neighbours by image embedding, for NegCLIP's hard-negative images (`negclip --method-opt
hard_images=neighbours`): `compclip neighbours DATA.jsonl --model M --out OUT.jsonl` writes DATA's records with a list of
record indices each, the data field the method reads.

NegCLIP's released training file lists each row's hard-negative rows (`neg_image`, three a row in its validation file),
but the released code does not say how they were found. This computes them one plain way: the cosine similarity of
the model's image embeddings (its evaluation view), each record's `k` most similar other records, most similar first.
A record whose image cannot be read has no embedding: it is no one's neighbour, and its own list is empty (a bad record
when training, skipped and counted).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .errors import UsageError

CHUNK = 1024  # rows of the similarity matrix at once: 4 MiB a thousand records, never the whole N × N


def nearest_neighbours(features: torch.Tensor, k: int = 3) -> torch.Tensor:
    """(N, k) indices of each row's `k` most cosine-similar other rows of `features` (N, D), most similar first."""
    if not 0 < k < features.shape[0]:
        raise UsageError(f"--k must be 1 to {features.shape[0] - 1} (the other records), not {k}")
    x = F.normalize(features.float(), dim=-1)
    found = []
    for start in range(0, x.shape[0], CHUNK):
        sims = x[start : start + CHUNK] @ x.T
        rows = torch.arange(sims.shape[0])
        sims[rows, rows + start] = float("-inf")  # never itself
        found.append(sims.topk(k, dim=1).indices)
    return torch.cat(found)


def write_neighbours(data: str | Path, out: str | Path, model: str, pretrained: str | None = None, *, k: int = 3,
                     key: str = "neighbours", image_key: str = "image", caption_key: str = "caption",
                     image_root: str | Path | None = None, batch_size: int = 64, device: str = "cpu") -> dict[str, Any]:
    """`out`: the JSON lines `data` with each record's `k` nearest neighbours (`nearest_neighbours` of `model`'s image
    embeddings) under `key`, index i naming the i-th record as the reader counts them (blank lines not counted). Returns
    the counts: records, embedded, without an image."""
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
    index = {reader.record_at(i)[0]: i for i in range(total)}  # "FILE:LINE" -> the record's index
    rows, features = [], []
    batches = torch.utils.data.DataLoader(reader, batch_size=batch_size, collate_fn=lambda s: s)
    with torch.no_grad():
        for samples in batches:
            rows += [index[s["key"]] for s in samples]
            features.append(net.encode_image(torch.stack([s["image"] for s in samples]).to(device)).cpu())
    if len(rows) < 2:
        raise UsageError(f"{data}: {len(rows)} of its {total} records has an image that reads: no neighbours to find")
    found = nearest_neighbours(torch.cat(features), k)
    lists = {row: [rows[j] for j in near] for row, near in zip(rows, found.tolist(), strict=True)}
    with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for i, (_, value) in enumerate(json_lines(data)):
            if isinstance(value, dict):
                value = {**value, key: lists.get(i, [])}
            f.write((json.dumps(value, ensure_ascii=False) if not isinstance(value, Exception) else value.doc.rstrip("\n")) + "\n")
    return {"records": total, "embedded": len(rows), "without_image": total - len(rows)}
