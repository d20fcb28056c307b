"""The papers' released checkpoints as data: one JSON file each in this folder, named by its id, like the recipes.

An entry names a row (or several) of the four papers' tables (`rows`, as `compclip.eval.papers` spells them) and how
compclip loads its weights (`loads_as`): an open_clip architecture and pretrained tag of open_clip's own registry, with
the Hub repository the registry downloads it from (`open_clip`; `hf_hub`), an `hf-hub:` repository (`open_clip_hub`), an
open_clip architecture and a weights file from a Hub repository (`hub_repo`, `hub_file`) or from a link no library
downloads reliably (`url`, saved by hand as `file`, `get` saying where) (`open_clip_file`), a transformers model
`hf:ORG/NAME` (`transformers`), or none, `unavailable` saying why.
A file open_clip's loader cannot read as it is, its weights under another key (`state_dict_key`) or LoRA halves beside
them (`lora`, merged by `compclip.models.released.lora`), is converted once into a safetensors file beside it.
Each entry cites the release it was read from (`source`) and says what was read and what inferred (`verified`).

`resolve` turns an entry into what `load_model` and the transformers scorers already take, so `--model negclip-b32`
scores as `--model ViT-B-32-quickgelu --pretrained negclip.pth` does. A weights file is checked against the SHA-256 the
release publishes, or, where it publishes none, against the one recorded at its first load
(`$HF_HUB_CACHE/compclip-released/<id>.sha256`): a file that changed is refused, naming both.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from ...errors import DataError, DownloadError, MissingFileError, UsageError
from ...io import sha256_of
from ...text import did_you_mean

ROUTES = ("open_clip", "open_clip_hub", "open_clip_file", "transformers")
FOLDER = "compclip-released"  # under the Hugging Face cache: the hand-downloaded files and the recorded hashes


@dataclass(frozen=True)
class Released:
    id: str
    name: str
    rows: list[list[str]]  # [paper, model] as `compclip.eval.papers/<paper>.json` spells the row
    loads_as: str | None
    licence: str
    source: str
    verified: str
    model: str | None = None  # open_clip architecture, hf-hub:ORG/NAME, hf:ORG/NAME; for an unavailable one, its class if known
    pretrained: str | None = None
    # an `open_clip` entry's: the Hub repository open_clip's registry downloads the tag from (its `hf_hub`), so that
    # `compclip models` says whether it is cached without loading open_clip (3 s); a test holds it to the registry's
    hf_hub: str | None = None
    hub_repo: str | None = None
    hub_file: str | None = None
    url: str | None = None
    file: str | None = None
    get: str | None = None
    sha256: str | None = None  # only where the release publishes one
    state_dict_key: str | None = None  # where the file keeps the state dict under another key than open_clip's "state_dict"
    lora: dict | None = None  # {"rank", "alpha", "layers": patterns of the weights with LoRA}: merged when converted
    blip_score: str | None = None
    unavailable: str | None = None


def _check(entry: Released, file: str) -> Released:
    """An entry is one route's, with what that route needs: a broken file is a bug of the package, said by name."""
    needs = {"open_clip": ("model", "pretrained", "hf_hub"), "open_clip_hub": ("model",), "transformers": ("model",),
             "open_clip_file": ("model",), None: ("unavailable",)}
    if entry.loads_as not in needs or file != f"{entry.id}.json":
        raise ValueError(f"released {file}: loads_as {entry.loads_as!r} is none of {ROUTES} or null, or the file is not named by its id")
    lacking = [k for k in needs[entry.loads_as] if not getattr(entry, k)]
    if entry.loads_as == "open_clip_file" and not (entry.hub_repo and entry.hub_file) and not (entry.url and entry.file and entry.get):
        lacking.append("hub_repo and hub_file, or url, file and get")
    if entry.lora and not entry.state_dict_key:
        lacking.append("state_dict_key (a LoRA checkpoint is converted from where it keeps its weights)")
    if lacking or (entry.loads_as is not None and entry.unavailable):
        raise ValueError(f"released {file}: lacks {', '.join(lacking)}" if lacking else f"released {file}: loadable and unavailable")
    return entry


@cache
def _entries() -> dict[str, Released]:
    found = {}
    for item in sorted(resources.files(__name__).iterdir(), key=lambda e: e.name):
        if item.name.endswith(".json"):
            entry = _check(Released(**json.loads(item.read_text(encoding="utf-8"))), item.name)
            found[entry.id] = entry
    return found


def list_released() -> list[str]:
    return sorted(_entries())


def is_released(name: str) -> bool:
    """Whether `name` is a registry id (and not a folder of that name, which `model_name` has made a path already)."""
    return name in _entries() and not Path(name).exists()


def get_released(name: str) -> Released:
    """The entry whose id is `name`, or whose name is, case aside; an unknown one is an error naming the closest ids."""
    entries = _entries()
    if name in entries:
        return entries[name]
    by_name = {e.name.casefold(): e for e in entries.values()}
    if name.casefold() in by_name:
        return by_name[name.casefold()]
    raise UsageError(f"no released checkpoint {name!r}{did_you_mean(name, entries, n=3)} (`compclip models` lists them)")


def cache_root() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE) / FOLDER


def hand_path(entry: Released) -> Path:
    """Where the file of a `url` entry is looked for: downloaded by hand, saved there."""
    return cache_root() / entry.id / entry.file


@dataclass(frozen=True)
class Resolved:
    """What `load_model` (model, pretrained) or the transformers scorers (model, blip_score) take."""

    model: str
    pretrained: str | None = None
    blip_score: str | None = None


def resolve(entry: Released, pretrained: str | None = None) -> Resolved:
    """The entry as compclip's loaders name it, its weights file fetched into the Hugging Face cache and its hash checked.
    `pretrained`: a copy of the file the user has already, loaded in place of the entry's (checked the same way)."""
    if entry.loads_as is None:
        raise UsageError(f"{entry.id} ({entry.name}) cannot be loaded: {entry.unavailable}")
    if pretrained and entry.loads_as != "open_clip_file":
        raise UsageError(f"{entry.id} loads its own weights ({entry.loads_as}); --pretrained {pretrained} applies to an "
                         "entry of a weights file, or give the architecture as --model")
    if entry.loads_as != "open_clip_file":
        return Resolved(entry.model, entry.pretrained, entry.blip_score)
    file = Path(pretrained) if pretrained else _fetch(entry)
    if not file.is_file():
        raise MissingFileError(f"--pretrained {file}: no such file")
    _check_hash(entry, file)
    return Resolved(entry.model, str(_state_dict_file(entry, file)))


def _fetch(entry: Released) -> Path:
    """The entry's file: from its Hub repository through the Hugging Face cache (resumable), or where the user put it."""
    if entry.hub_repo:
        from huggingface_hub import constants, hf_hub_download

        try:
            return Path(hf_hub_download(entry.hub_repo, entry.hub_file))
        except Exception as e:
            where = f"{entry.hub_repo}/{entry.hub_file}"
            if constants.HF_HUB_OFFLINE:
                raise MissingFileError(f"{entry.id}: {where} is not in the Hugging Face cache {constants.HF_HUB_CACHE}, and "
                                       "HF_HUB_OFFLINE forbids downloading it: run once online, or set HF_HUB_CACHE to a cache "
                                       "that holds it") from None
            said = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise DownloadError(f"{entry.id}: {where} could not be downloaded ({said}); running again resumes it") from None
    path = hand_path(entry)
    if not path.is_file():
        # a file keeping its weights under another key loads by the id alone (`_state_dict_file`)
        elsewhere = "" if entry.state_dict_key else f", or as --model {entry.model} --pretrained FILE"
        raise MissingFileError(f"{entry.id}: {path} is not there. {entry.get} Save it as {path} (or give the file to "
                               f"--pretrained{elsewhere})")
    return path


def _check_hash(entry: Released, file: Path) -> None:
    """The file's SHA-256 against the release's, or against the one recorded at its first load (recorded now if none)."""
    digest = sha256_of(file)
    record = cache_root() / f"{entry.id}.sha256"
    if entry.sha256:
        expected, said = entry.sha256, "the release publishes"
    elif record.is_file():
        expected, said = record.read_text(encoding="utf-8").split()[0], f"its first load recorded in {record}"
    else:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(f"{digest}  {file}\n", encoding="utf-8")
        return
    if digest != expected:
        raise DataError(f"{file}: SHA-256 {digest}, but {expected} is the one {said}; refused (a changed or corrupt file), "
                        f"delete it to fetch it again{'' if entry.sha256 else f', or {record} if the release replaced it'}")


def _state_dict_file(entry: Released, file: Path) -> Path:
    """A file whose state dict sits under another key (CoN-CLIP's "model"), or whose LoRA halves are to be merged (DAC's,
    SVLC's), as a safetensors file open_clip's loader reads, written once beside the hand-downloaded one."""
    if not entry.state_dict_key:
        return file
    import torch
    from safetensors.torch import save_file

    out = cache_root() / entry.id / f"{file.stem}.{entry.state_dict_key}{'.merged' if entry.lora else ''}.safetensors"
    if not out.is_file() or out.stat().st_mtime < file.stat().st_mtime:
        held = torch.load(str(file), map_location="cpu", weights_only=True)
        if not isinstance(held, dict) or not isinstance(held.get(entry.state_dict_key), dict):
            raise DataError(f"{file}: no state dict under {entry.state_dict_key!r}, where {entry.id}'s release keeps it")
        state = held[entry.state_dict_key]
        if entry.lora:
            from .lora import merge

            state = merge(state, entry.lora, entry.model, file)
        out.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in state.items()}, str(out) + ".part")
        os.replace(str(out) + ".part", out)
    return out


def cached(entry: Released) -> bool:
    """Whether the entry's weights are on this machine already (a Hub file in the Hugging Face cache, a hand-downloaded
    file where it is looked for)."""
    from huggingface_hub import try_to_load_from_cache

    if entry.loads_as == "open_clip_file":
        return hand_path(entry).is_file() if entry.url else isinstance(try_to_load_from_cache(entry.hub_repo, entry.hub_file), str)
    if entry.loads_as == "open_clip":
        repo = entry.hf_hub
        files = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")
    else:
        repo = entry.model.partition(":")[2]
        files = (("open_clip_model.safetensors", "open_clip_pytorch_model.bin") if entry.loads_as == "open_clip_hub"
                 else ("model.safetensors", "pytorch_model.bin"))
    return bool(repo) and any(isinstance(try_to_load_from_cache(repo, f), str) for f in files)


__all__ = ["Released", "Resolved", "cached", "get_released", "hand_path", "is_released", "list_released", "resolve"]
