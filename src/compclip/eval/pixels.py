"""Images decoded once for a sweep's models (`compclip eval --model a,b,c`).

A sweep scores its models one after another, and each model's scorer decodes and preprocesses every image of every
benchmark it runs. Two models whose preprocessing has the same parameters (open_clip's evaluation transform of equal
`PreprocessCfg`s: size, mode, mean, std, interpolation, resize mode, fill; a transformers processor of the same class and
image settings) make the same tensor of the same image, so the first of them keeps each tensor here and the next take
it: a model's batches are the ones it would have made alone, row for row, and its scores the same to the bit. An image
that does not decode is kept as why, so that later models name it as the first did without opening it again.

Tensors are kept in memory up to `MEMORY_BYTES`; past that, in safetensors files in a scratch folder under --out, made
under the umask, each written whole or not at all (`atomic_path`) and removed when the sweep ends. safetensors rather
than pickle: a file is read back as tensors only, never as code, and one image's tensors are read without the rest of
its file. Past `DISK_BYTES`, or where the disk would keep under `DISK_FREE` of its space, an image is not kept, and each
model decodes it again, as alone. The images are those of one command: a file changed while the sweep runs is seen by
later models as the first model decoded it.
"""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..errors import StorageError
from ..io import atomic_path

log = logging.getLogger("compclip.eval")

MEMORY_BYTES = 2 << 30  # 2 GiB of tensors in memory: 3,500 images at 224 px, 1,300 at 384
DISK_BYTES = 64 << 30  # and at most 64 GiB of them on disk
DISK_FREE = 0.1  # never leaving the disk with less than a tenth of its space free

Pixels = torch.Tensor | dict[str, torch.Tensor]  # one preprocessed image, as the preprocessing makes it


def size_of(pixels: Pixels) -> int:
    return sum(t.nbytes for t in pixels.values()) if isinstance(pixels, dict) else pixels.nbytes


def own_copy(pixels: Pixels) -> Pixels:
    """An image's tensors apart from their batch: a row is a view of it, which a worker made in shared memory."""
    return {k: v.clone() for k, v in pixels.items()} if isinstance(pixels, dict) else pixels.clone()


class SweepPixels:
    """The preprocessed images of a sweep, by preprocessing and image key: in memory, in files under `folder`, or the
    reason an image does not decode. `keeping` is False for the sweep's last model, which no model follows."""

    def __init__(self, folder: Path, memory_bytes: int = MEMORY_BYTES, disk_bytes: int = DISK_BYTES):
        self.folder, self.memory_bytes, self.disk_bytes = folder, memory_bytes, disk_bytes
        self.keeping = True
        self.in_memory: dict[tuple[str, str], Pixels] = {}
        self.on_disk: dict[tuple[str, str], tuple[Path, str]] = {}  # (file, the row's name in it)
        self.unreadable: dict[tuple[str, str], str] = {}
        self.held = {"memory": 0, "disk": 0}  # bytes of tensors kept each way
        self._files = 0
        self._disk_refused = False

    def of(self, preprocessing: dict[str, Any]) -> SharedPixels:
        """The images of one preprocessing, told by its parameters' values (never by the transform object's identity)."""
        return SharedPixels(self, json.dumps(preprocessing, sort_keys=True, default=str))

    def keep(self, rows: list[tuple[tuple[str, str], Pixels | str]]) -> None:
        """Keep a batch's rows (an image's tensors, or why it did not decode): in memory while they fit, the rest in one
        file while the disk allows."""
        spill = []
        for key, value in rows:
            if isinstance(value, str):
                self.unreadable[key] = value
            elif self.held["memory"] + size_of(value) <= self.memory_bytes:
                self.in_memory[key] = own_copy(value)
                self.held["memory"] += size_of(value)
            else:
                spill.append((key, own_copy(value)))
        if spill and not self._disk_refused:
            self._write(spill)

    def _write(self, rows: list[tuple[tuple[str, str], Pixels]]) -> None:
        size = sum(size_of(v) for _, v in rows)
        disk = shutil.disk_usage(self.folder)
        if self.held["disk"] + size > self.disk_bytes or disk.free - size < DISK_FREE * disk.total:
            return
        tensors, names = {}, []
        for n, (_, value) in enumerate(rows):
            names.append(str(n))
            tensors.update({f"{n}.{k}": v for k, v in value.items()} if isinstance(value, dict) else {str(n): value})
        file = self.folder / f"{self._files}.safetensors"
        try:
            with atomic_path(file) as tmp:
                save_file(tensors, tmp)
        except (OSError, StorageError) as e:  # a full disk, a quota: the scores stand without it, each model decoding
            self._disk_refused = True
            log.warning("%s: decoded images cannot be kept on disk (%s): the models after this one decode those past %d MiB "
                        "again", self.folder, getattr(e, "strerror", None) or e, self.memory_bytes >> 20)
            return
        self._files += 1
        self.held["disk"] += size
        self.on_disk.update({key: (file, name) for (key, _), name in zip(rows, names, strict=True)})

    def take(self, keys: list[tuple[str, str]]) -> list[Pixels | str]:
        """Each key's tensors (or why it does not decode), each file opened once."""
        found: dict[tuple[str, str], Pixels | str] = {}
        by_file: dict[Path, list[tuple[tuple[str, str], str]]] = {}
        for key in keys:
            if key in self.unreadable:
                found[key] = self.unreadable[key]
            elif key in self.in_memory:
                found[key] = self.in_memory[key]
            else:
                file, name = self.on_disk[key]
                by_file.setdefault(file, []).append((key, name))
        for file, wanted in by_file.items():
            with safe_open(file, framework="pt") as f:
                stored = list(f.keys())
                for key, name in wanted:
                    fields = {k.partition(".")[2]: f.get_tensor(k) for k in stored if k.startswith(f"{name}.")}
                    found[key] = fields or f.get_tensor(name)
        return [found[key] for key in keys]

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self.in_memory or key in self.on_disk or key in self.unreadable

    def summary(self) -> str:
        """What was kept, in bytes beside the memory bound (in MiB, a sweep of small images would read 0 of 0)."""
        return (f"{len(self.in_memory)} in memory ({self.held['memory']:,} bytes, at most {self.memory_bytes:,}), "
                f"{len(self.on_disk)} on disk ({self.held['disk']:,} bytes), {len(self.unreadable)} that do not decode")


class SharedPixels:
    """What a scorer sees of the sweep's images: those of its own preprocessing, by its image keys."""

    def __init__(self, sweep: SweepPixels, preprocessing: str):
        self.sweep, self.preprocessing = sweep, preprocessing

    def __contains__(self, key: str) -> bool:
        return (self.preprocessing, key) in self.sweep

    def keep(self, rows: list[tuple[str, Pixels | str]]) -> None:
        if self.sweep.keeping:
            self.sweep.keep([((self.preprocessing, key), value) for key, value in rows])

    def take(self, keys: list[str]) -> list[Pixels | str]:
        return self.sweep.take([(self.preprocessing, key) for key in keys])
