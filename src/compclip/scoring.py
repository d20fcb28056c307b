"""Scoring: what every benchmark asks of a model, one score per image–text pair, below the methods and the harness.

A benchmark never computes a similarity itself: it asks a `Scorer` for `pairs` (one score per
(image, text)), a `matrix` (every image against every text: retrieval), `class_scores`
(zero-shot) and, where the model has one, `text_pairs` (SugarCrepe++'s text-only score; a scorer
without it gives None and the benchmark reports "n/a"). So a model whose score is not a dot
product of two pooled vectors (OC-CLIP's graph-conditioned score, `methods.occlip.GraphScorer`) runs every benchmark
unchanged. A method's scorer builds on this module; the harness (`compclip.eval`) asks a method for it.

`DualEncoderScorer` is the scorer of every CLIP-style model: each unique image and caption is
encoded once per run (de-duplicated, texts in batches of similar length), optionally under
autocast, and can be kept on disk keyed by a hash of every weight the score depends on, the preprocessing, the
tokenizer and the library versions (`model_key`), and each file (path, size, mtime).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from PIL import Image as PILImage
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch.utils.data import DataLoader, Dataset, default_collate

from . import stops
from .data.images import ImageRef, image_ref
from .data.shared_memory import check_shared_memory
from .errors import DataError, NonFiniteError, StorageError
from .io import atomic_path
from .models.tokens import short_text_encoder, text_width
from .precision import autocast, image_dtype
from .progress import progress

log = logging.getLogger("compclip.eval")

Box = tuple[float, float, float, float]  # left, top, right, bottom: a crop (ARO's regions)
Image = ImageRef | str | Path  # what a benchmark hands a scorer: a file, or an image inside a data file


def _image_key(real: str, image: ImageRef, box: Box | None) -> str:
    """An image's identity for the scorer's memo: its file's real path `real` (links and `..` resolved, so that one file
    named two ways is encoded once), its place in that file, how its pixels become RGB where not by compclip's viewer
    (`ImageRef.colours`: the memo, the embedding cache and a sweep's decoded pixels never take one rule's for the
    other's), its crop."""
    key = real + (f"::{image.member}" if image.member else "") + ("" if image.colours == "viewer" else f" [{image.colours} RGB]")
    return key if box is None else f"{key}#{','.join(map(str, box))}"


class UnreadableImagesError(DataError):
    """Images a benchmark asked to score that do not decode ({image: why}). `compclip.eval.evaluate` then runs the
    benchmark again, and its `Missing` leaves them out and names them."""

    def __init__(self, images: dict[str, str]):
        self.images = images
        first = next(iter(images))
        super().__init__(f"{len(images)} images do not decode, e.g. {first}: {images[first]}")


class _Images(Dataset):
    def __init__(self, items: Sequence[tuple[ImageRef, Box | None]], preprocess: Callable, shared: frozenset[int] = frozenset()):
        self.items, self.preprocess, self.shared = list(items), preprocess, shared

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor | None, str | None]:
        """(i, the preprocessed image, "") or (i, None, why it does not decode): a bad file is reported, not raised.
        (i, None, None) for an image in `shared`, which a sweep's earlier model decoded: it is not opened again."""
        if i in self.shared:
            return i, None, None
        ref, box = self.items[i]
        try:
            image = ref.decode()
        except (OSError, ValueError, SyntaxError, PILImage.DecompressionBombError) as e:  # not an image, truncated, too large
            return i, None, f"{type(e).__name__}: {e}"
        return i, self.preprocess(image.crop(box) if box else image), ""


def _collate_images(items: list[tuple[int, torch.Tensor | None, str | None]]):
    good = [(i, t) for i, t, _ in items if t is not None]
    batch = default_collate([t for _, t in good]) if good else None  # a tensor, or a dict of them (`_on`)
    failed = [(i, why) for i, t, why in items if t is None and why is not None]
    return batch, [i for i, _ in good], failed, [i for i, _, why in items if why is None]  # the last: `_Images.shared`'s


def _row(batch: torch.Tensor | dict[str, torch.Tensor], j: int):
    """Row `j` of a batch: one image's tensors, as the preprocessing made them before they were stacked."""
    return {k: v[j] for k, v in batch.items()} if isinstance(batch, dict) else batch[j]


def _on(batch: torch.Tensor | dict[str, torch.Tensor], device: torch.device, dtype: torch.dtype):
    """A batch of pixels on `device` in the tower's dtype. A processor that gives an image as several tensors (SigLIP 2's
    patches, their mask and grid size) gives a dict: its floating tensors so, the rest (masks, sizes) as integers."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, dtype=dtype)
    return {k: v.to(device, dtype=dtype) if v.is_floating_point() else v.to(device) for k, v in batch.items()}


def model_key(model: torch.nn.Module) -> str:
    """A hash of everything that makes a feature, naming the model in the cache: the weights themselves, the architecture,
    the preprocessing (the spec's and the one open_clip's tower carries: mean, std, size, resize mode), the tokenizer,
    and the versions of compclip and open_clip that compute them."""
    import open_clip

    from . import __version__

    spec = getattr(model, "compclip_spec", {})
    about = {key: spec.get(key) for key in ("model_cfg", "preprocess_cfg", "tokenizer")}
    about |= {"visual_preprocess": getattr(getattr(model, "visual", None), "preprocess_cfg", None), "compclip": __version__,
              "open_clip": open_clip.__version__}
    digest = hashlib.sha256(json.dumps(about, sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu").contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:24]


class Scorer:
    """Scores of image–text pairs. Subclasses implement `pairs` and `matrix`; the rest have defaults."""

    encoded: dict[str, int]  # what the scorer computed in this run, for the log
    label = ""  # what is being scored (a benchmark, or a benchmark's split): the progress bars name it
    part = ""  # the benchmark's split, dataset or class being scored now (`at`)

    @contextlib.contextmanager
    def labelled(self, label: str) -> Iterator[None]:
        """Inside the block, the scorer's progress bars are named `label: images` and `label: texts`."""
        before, self.label, self.part = (self.label, self.part), label, ""
        try:
            yield
        finally:
            self.label, self.part = before

    def at(self, part: str) -> None:
        """A benchmark scores its part `part` (a split, a dataset) from here on: the bars say `label/part: images`."""
        self.part = part

    def _bar(self, iterable, what: str, total: int):
        """One bar a batch of encoding, named by what it scores; gone from the terminal once done (a benchmark's splits
        would otherwise stack a dozen finished bars)."""
        name = self.label if not self.part or self.label.endswith(f"/{self.part}") else "/".join(filter(None, (self.label, self.part)))
        return progress(iterable, f"{name}: {what}" if name else what, total=total, unit="batch", leave=False)

    def pairs(self, images: Sequence[Image], texts: Sequence[str], boxes: Sequence[Box] | None = None) -> torch.Tensor:
        """One score per (images[k], texts[k]), of the image or its `boxes[k]` crop."""
        raise NotImplementedError

    def matrix(self, images: Sequence[Image], texts: Sequence[str]) -> torch.Tensor:
        """Every image against every text: (len(images), len(texts)), computed in chunks."""
        raise NotImplementedError

    def class_scores(self, images: Sequence[Image], prompts: Sequence[Sequence[str]]) -> torch.Tensor:
        """(images, classes) zero-shot scores from each class's prompts: by default the mean score over them."""
        flat = [p for class_prompts in prompts for p in class_prompts]
        scores, start, out = self.matrix(images, flat), 0, []
        for class_prompts in prompts:
            out.append(scores[:, start : start + len(class_prompts)].mean(-1))
            start += len(class_prompts)
        return torch.stack(out, dim=1) if out else torch.zeros(len(images), 0)

    def text_pairs(self, a: Sequence[str], b: Sequence[str]) -> torch.Tensor | None:
        """One text-to-text score per (a[k], b[k]), or None for a model that has no such score."""
        return None


class DualEncoderScorer(Scorer):
    """A CLIP-style model: the score is the dot product of L2-normalised image and text embeddings."""

    def __init__(self, model, preprocess, tokenizer, device="cpu", batch_size: int = 64, workers: int = 2,
                 cache_dir: str | Path | None = None, precision: str = "fp32"):
        self.model, self.preprocess, self.tokenizer = model.eval(), preprocess, tokenizer
        self.device, self.batch_size, self.workers = torch.device(device), batch_size, workers
        self.precision = precision
        self.image_dtype = image_dtype(model)  # pixels enter in the tower's dtype (16-bit weights: open_clip's bf16)
        self.cache = Path(cache_dir) / f"{model_key(model)}-{precision}" if cache_dir else None
        self._cache_warned: set[str] = set()
        self._images: dict[str, torch.Tensor] = {}
        self._texts: dict[str, torch.Tensor] = {}
        self._sources: dict[str, tuple[ImageRef, Box | None]] = {}  # each image key's image and crop, for encoding
        self._real: dict[Path, str] = {}  # each file's real path, resolved once
        self.unreadable: dict[str, str] = {}  # image (file or member) -> why it does not decode
        self.encoded = {"images": 0, "texts": 0}  # how many this scorer actually computed
        self._asked: set[str] = set()  # image keys scored (`asked`)
        self._blind: torch.Tensor | None = None  # the one image embedding of a blind run (`blind`)
        # a sweep's preprocessed images, shared by the models of one preprocessing (`compclip.eval.pixels.SharedPixels`):
        # `in`, `keep([(key, tensors or why)])` and `take(keys)`; None when scored alone
        self.pixels = None
        self.decoded = {"decoded": 0, "shared": 0}  # images this scorer decoded, and those it took from `pixels`

    # -- scores -----------------------------------------------------------------------
    def pairs(self, images, texts, boxes=None):
        return (self.images(images, boxes) * self.texts(texts)).sum(-1)

    def matrix(self, images, texts):
        return self.images(images) @ self.texts(texts).T

    def class_scores(self, images, prompts):
        """CLIP's prompt ensemble: each class is the normalised mean of its prompts' normalised embeddings. Every class's
        prompts go to the text tower together, in batches of similar length, not in one small pass a class: on a CPU a
        pass over a few prompts costs little more than one over a few hundred."""
        flat = self.texts([p for class_prompts in prompts for p in class_prompts])
        weights = torch.stack([F.normalize(rows.mean(0), dim=0) for rows in flat.split([len(p) for p in prompts])])
        return self.images(images) @ weights.T

    def text_pairs(self, a, b):
        return (self.texts(a) * self.texts(b)).sum(-1)

    # -- embeddings -------------------------------------------------------------------
    def images(self, images: Sequence[Image], boxes: Sequence[Box] | None = None) -> torch.Tensor:
        """L2-normalised embeddings, one row per image (repeats allowed), of the image or its `boxes` crop; under `blind`,
        the one embedding it gives for every image."""
        keys = self._image_keys(images, boxes)
        if self._blind is not None:
            return self._blind.expand(len(keys), -1)
        self._fill(self._images, keys, "images", self._encode_images)
        self._check_read(keys)
        self._asked.update(keys)
        return torch.stack([self._images[k] for k in keys]) if keys else torch.empty(0, 0)

    # -- the text prior ---------------------------------------------------------------
    @contextlib.contextmanager
    def asked(self) -> Iterator[set[str]]:
        """The keys of the images scored inside the block (a benchmark's images, crops included)."""
        self._asked = set()
        try:
            yield self._asked
        finally:
            self._asked = set()

    @contextlib.contextmanager
    def blind(self, keys: set[str]) -> Iterator[None]:
        """Inside the block, every image embeds as the normalised mean of the embeddings of `keys` (`compclip eval --blind`):
        a score then depends on the texts alone, the model's prior over them given an average image of the benchmark."""
        if not keys:
            raise ValueError("blind: no image was scored to average")
        self._blind = F.normalize(torch.stack([self._images[k] for k in sorted(keys)]).mean(0), dim=0)
        try:
            yield
        finally:
            self._blind = None

    def texts(self, captions: Sequence[str]) -> torch.Tensor:
        keys = list(captions)
        self._fill(self._texts, keys, "texts", self._encode_texts)
        return torch.stack([self._texts[k] for k in keys]) if keys else torch.empty(0, 0)

    # -- internals --------------------------------------------------------------------
    def _image_keys(self, images: Sequence[Image], boxes: Sequence[Box] | None) -> list[str]:
        keys = []
        for image, box in zip(images, boxes or [None] * len(images), strict=True):
            ref = image_ref(image)
            real = self._real.get(ref.file) or self._real.setdefault(ref.file, os.path.realpath(ref.file))
            keys.append(_image_key(real, ref, box))
            self._sources.setdefault(keys[-1], (ref, box))
        return keys

    def _check_read(self, keys: list[str]) -> None:
        bad = {self._sources[k][0].key: self.unreadable[self._sources[k][0].key] for k in keys
               if self._sources[k][0].key in self.unreadable}
        if bad:
            raise UnreadableImagesError(bad)

    def _fill(self, memo: dict, keys: list[str], kind: str, encode: Callable[[list[str]], tuple[list[str], torch.Tensor]]) -> None:
        """Encode (or read from the cache) what `memo` lacks of `keys`; `encode` returns the keys it could encode and their rows."""
        todo = [k for k in dict.fromkeys(keys) if k not in memo and (kind == "texts" or self._sources[k][0].key not in self.unreadable)]
        if not todo:
            return
        cached = self._load(kind, todo)
        if cached is None:
            done, embeddings = encode(todo)
            self.encoded[kind] += len(done)
            if done:
                finite = torch.isfinite(embeddings.flatten(1)).all(1)
                if not finite.all():
                    first = done[int((~finite).nonzero()[0])]
                    raise NonFiniteError(f"the model gives a non-finite embedding (NaN or inf) for {kind[:-1]} {first!r}: its weights "
                                         "or this input are broken; refused, no score is computed from it")
            if len(done) == len(todo):
                self._save(kind, todo, embeddings)
        else:
            done, embeddings = todo, cached
        memo.update(zip(done, embeddings, strict=True))

    def _cache_file(self, kind: str, keys: list[str]) -> Path:
        if kind in ("images", "tokens"):  # an image's identity: its key (path, place in its file, crop), the file's size and time
            stats = [self._sources[k][0].file.stat() for k in keys]
            ids = [f"{k}|{st.st_size}|{st.st_mtime_ns}" for k, st in zip(keys, stats, strict=True)]
        else:
            ids = keys
        digest = hashlib.sha256("\n".join(ids).encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return self.cache / f"{kind}-{digest}.safetensors"

    def _load(self, kind: str, keys: list[str]) -> torch.Tensor | None:
        if self.cache is None:
            return None
        try:
            file = self._cache_file(kind, keys)
            if not file.is_file():
                return None
        except OSError as e:  # another user's private cache (umask 077): an optimisation, so only said
            self._cache_unusable("read", e)
            return None
        try:
            embeddings = load_file(file)["embeddings"]
            if embeddings.ndim < 2 or len(embeddings) != len(keys) or not torch.isfinite(embeddings).all():
                raise ValueError(f"{tuple(embeddings.shape)} rows for {len(keys)} {kind}, or a non-finite value")
        except (SafetensorError, KeyError, ValueError, OSError) as e:  # a cut copy, another tool's file, a disk error
            log.warning("%s: a damaged cache entry (%s: %s): encoded again, and the entry written anew", file, type(e).__name__, e)
            return None
        return embeddings

    def _save(self, kind: str, keys: list[str], embeddings: torch.Tensor) -> None:
        if self.cache is None:
            return
        try:
            self.cache.mkdir(parents=True, exist_ok=True)
            with atomic_path(self._cache_file(kind, keys)) as tmp:
                save_file({"embeddings": embeddings.contiguous()}, tmp)
        except (OSError, StorageError) as e:  # a full disk or another user's folder: the scores stand without it
            self._cache_unusable("written", e)

    def _cache_unusable(self, how: str, error: Exception) -> None:
        """Warn once per scorer and way that the cache folder cannot be used; the features are computed all the same."""
        if how not in self._cache_warned:
            self._cache_warned.add(how)
            log.warning("%s: the feature cache cannot be %s (%s): features are computed without it", self.cache, how,
                        getattr(error, "strerror", None) or error)

    def _encode_images(self, keys: list[str]) -> tuple[list[str], torch.Tensor]:
        return self._over_images(keys, "images", lambda batch: F.normalize(self.model.encode_image(batch).float(), dim=-1))

    @torch.no_grad()
    def _over_images(self, keys: list[str], desc: str, encode: Callable[[torch.Tensor], torch.Tensor]) -> tuple[list[str], torch.Tensor]:
        """`encode` over the images of `keys`, decoded and preprocessed in DataLoader workers, in batches: the keys of
        the images that decoded and their rows; the others are recorded in `unreadable`."""
        from .models import image_bytes

        shared = frozenset(i for i, k in enumerate(keys) if self.pixels is not None and k in self.pixels)
        images = _Images([self._sources[k] for k in keys], self.preprocess, shared)
        workers = self.workers if len(shared) < len(keys) else 0  # every image shared: no worker to start
        check_shared_memory(workers, min(self.batch_size, len(keys)) * image_bytes(self.model), f"batches of {desc}")
        loader = DataLoader(images, batch_size=self.batch_size, num_workers=workers, collate_fn=_collate_images,
                            worker_init_fn=stops.worker_init)
        done, rows = [], []
        with stops.held():
            batches = iter(loader)
        for batch, indices, failed, held in self._bar(batches, desc, len(loader)):
            self.decoded["decoded"] += len(indices) + len(failed)
            if self.pixels is not None:
                batch, indices, failed = self._share(keys, batch, indices, failed, held)
            for i, why in failed:
                self.unreadable[self._sources[keys[i]][0].key] = why
            if batch is not None:
                with autocast(self.device, self.precision):
                    rows.append(encode(_on(batch, self.device, self.image_dtype)).float().cpu())
                done += [keys[i] for i in indices]
        return done, torch.cat(rows) if rows else torch.empty(0)

    def _share(self, keys: list[str], batch, indices: list[int], failed: list[tuple[int, str]], held: list[int]):
        """A batch as this model alone would have made it: the images it decoded, kept for the sweep's next models of
        its preprocessing, and those `held` (decoded by an earlier one) taken, in the batch's own order."""
        fresh = {i: _row(batch, j) for j, i in enumerate(indices)}
        self.pixels.keep([(keys[i], row) for i, row in fresh.items()] + [(keys[i], why) for i, why in failed])
        if not held:
            return batch, indices, failed
        self.decoded["shared"] += len(held)
        for i, value in zip(held, self.pixels.take([keys[i] for i in held]), strict=True):
            if isinstance(value, str):
                failed.append((i, value))
            else:
                fresh[i] = value
        indices = sorted(fresh)
        return (default_collate([fresh[i] for i in indices]) if indices else None), indices, sorted(failed)

    @torch.no_grad()
    def _encode_texts(self, keys: list[str]) -> tuple[list[str], torch.Tensor]:
        """Texts in batches of similar length; causal towers then skip the padding (`short_text_encoder`), cut where
        the host measured each batch (`TextWidth`): nothing is read back from the device."""
        encode, width = short_text_encoder(self.model), text_width(self.model)
        tokens = self.tokenizer(keys)
        order = torch.argsort((tokens != 0).sum(dim=1), stable=True)
        step = self.batch_size * 4
        rows = []
        for start in self._bar(range(0, len(keys), step), "texts", -(-len(keys) // step)):
            chunk = tokens[order[start : start + step]]
            with autocast(self.device, self.precision):
                features = self.model.encode_text(chunk.to(self.device)) if encode is None else encode(chunk.to(self.device), width(chunk))
                rows.append(F.normalize(features.float(), dim=-1).cpu())
        rows = torch.cat(rows)
        out = torch.empty_like(rows)
        out[order] = rows  # back to the callers' order
        return keys, out
