"""Embeddings for evaluation: each unique image and caption encoded once per model and run.

Benchmarks ask for embeddings of lists of image paths and captions; the encoder de-duplicates
against everything it has encoded in this run, batches the rest through a DataLoader, and can
keep them on disk keyed by the checkpoint's hash and each file (path, size, mtime).
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch.utils.data import DataLoader, Dataset

from ..data import decode_image
from ..io import atomic_path
from ..models.tokens import short_text_encoder
from ..progress import progress

log = logging.getLogger("compclip.eval")


Box = tuple[float, float, float, float]  # left, top, right, bottom: a crop (ARO's regions)


def _image_key(path: str | Path, box: Box | None) -> str:
    return str(Path(path)) if box is None else f"{Path(path)}#{','.join(map(str, box))}"


def _split_key(key: str) -> tuple[Path, Box | None]:
    path, _, box = key.partition("#")
    return Path(path), tuple(float(v) for v in box.split(",")) if box else None


class _Images(Dataset):
    def __init__(self, keys: Sequence[str], preprocess: Callable):
        self.keys, self.preprocess = list(keys), preprocess

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> torch.Tensor:
        path, box = _split_key(self.keys[i])
        image = decode_image(path)
        return self.preprocess(image.crop(box) if box else image)


def model_key(model: torch.nn.Module) -> str:
    """A hash of the weights themselves (and the architecture), naming the model in the cache."""
    digest = hashlib.sha256(json.dumps(getattr(model, "compclip_spec", {}).get("model_cfg"), sort_keys=True).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu").contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:24]


class Encoder:
    def __init__(
        self, model, preprocess, tokenizer, device="cpu", batch_size: int = 64, workers: int = 2, cache_dir: str | Path | None = None
    ):
        self.model, self.preprocess, self.tokenizer = model.eval(), preprocess, tokenizer
        self.device, self.batch_size, self.workers = torch.device(device), batch_size, workers
        self.cache = Path(cache_dir) / model_key(model) if cache_dir else None
        self._images: dict[str, torch.Tensor] = {}
        self._texts: dict[str, torch.Tensor] = {}
        self.encoded = {"images": 0, "texts": 0}  # how many this encoder actually computed

    # -- public -----------------------------------------------------------------------
    def images(self, paths: Sequence[str | Path], boxes: Sequence[Box] | None = None) -> torch.Tensor:
        """L2-normalised embeddings, one row per path (repeats allowed), of the image or its `boxes` crop."""
        keys = [_image_key(p, b) for p, b in zip(paths, boxes or [None] * len(paths), strict=True)]
        self._fill(self._images, keys, "images", self._encode_images)
        return torch.stack([self._images[k] for k in keys]) if keys else torch.empty(0, 0)

    def texts(self, captions: Sequence[str]) -> torch.Tensor:
        keys = list(captions)
        self._fill(self._texts, keys, "texts", self._encode_texts)
        return torch.stack([self._texts[k] for k in keys]) if keys else torch.empty(0, 0)

    # -- internals --------------------------------------------------------------------
    def _fill(self, memo: dict, keys: list[str], kind: str, encode: Callable[[list[str]], torch.Tensor]) -> None:
        todo = [k for k in dict.fromkeys(keys) if k not in memo]
        if not todo:
            return
        cached = self._load(kind, todo)
        if cached is None:
            embeddings = encode(todo)
            self.encoded[kind] += len(todo)
            self._save(kind, todo, embeddings)
        else:
            embeddings = cached
        memo.update(zip(todo, embeddings, strict=True))

    def _cache_file(self, kind: str, keys: list[str]) -> Path:
        if kind == "images":  # a file's identity: its path (and crop), size and modification time
            stats = [_split_key(k)[0].stat() for k in keys]
            ids = [f"{k}|{st.st_size}|{st.st_mtime_ns}" for k, st in zip(keys, stats, strict=True)]
        else:
            ids = keys
        digest = hashlib.sha256("\n".join(ids).encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return self.cache / f"{kind}-{digest}.safetensors"

    def _load(self, kind: str, keys: list[str]) -> torch.Tensor | None:
        if self.cache is None:
            return None
        file = self._cache_file(kind, keys)
        return load_file(file)["embeddings"] if file.is_file() else None

    def _save(self, kind: str, keys: list[str], embeddings: torch.Tensor) -> None:
        if self.cache is None:
            return
        self.cache.mkdir(parents=True, exist_ok=True)
        with atomic_path(self._cache_file(kind, keys)) as tmp:
            save_file({"embeddings": embeddings.contiguous()}, tmp)

    @torch.no_grad()
    def _encode_images(self, keys: list[str]) -> torch.Tensor:
        loader = DataLoader(_Images(keys, self.preprocess), batch_size=self.batch_size, num_workers=self.workers)
        rows = [F.normalize(self.model.encode_image(b.to(self.device)), dim=-1).float().cpu()
                for b in progress(loader, "images", total=len(loader), unit="batch")]
        return torch.cat(rows)

    @torch.no_grad()
    def _encode_texts(self, keys: list[str]) -> torch.Tensor:
        """Texts in batches of similar length; causal towers then skip the padding (`short_text_encoder`)."""
        encode = short_text_encoder(self.model) or self.model.encode_text
        tokens = self.tokenizer(keys)
        order = torch.argsort((tokens != 0).sum(dim=1), stable=True)
        step = self.batch_size * 4
        rows = torch.cat([
            F.normalize(encode(tokens[order[start : start + step]].to(self.device)), dim=-1).float().cpu()
            for start in progress(range(0, len(keys), step), "texts", total=-(-len(keys) // step), unit="batch")
        ])
        out = torch.empty_like(rows)
        out[order] = rows  # back to the callers' order
        return out
