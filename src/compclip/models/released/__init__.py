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
(`$HF_HUB_CACHE/compclip-released/<id>.sha256`): a file that changed is refused, naming both. The hash is recorded only
once the file has loaded (`Resolved.loaded`), so a download cut short, refused at its load, is never the one held to.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from ...errors import DataError, DownloadError, MissingFileError, UsageError
from ...io import atomic_path, refuse_links, sha256_of
from ...text import did_you_mean

ROUTES = ("open_clip", "open_clip_hub", "open_clip_file", "transformers")
FOLDER = "compclip-released"  # under the Hugging Face cache: the hand-downloaded files and the recorded hashes
# what a converted file says of the file it was converted from (its safetensors metadata): reused only while they match
SOURCE_SHA256, SOURCE_SIZE = "compclip_source_sha256", "compclip_source_size"


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
    """What `load_model` (model, pretrained) or the transformers scorers (model, blip_score) take; `unrecorded`, for a
    file no release publishes a hash of, loaded for the first time: (where its hash is recorded, what is recorded)."""

    model: str
    pretrained: str | None = None
    blip_score: str | None = None
    unrecorded: tuple[str, str] | None = None

    def loaded(self) -> None:
        """Record the weights file's SHA-256 as its first load's, called once the model holds its weights: a file whose
        load was refused (cut short, holding code, another model's) is never recorded as the one later loads must match."""
        if self.unrecorded is not None:
            record, line = self.unrecorded
            with atomic_path(record) as tmp:
                tmp.write_text(line, encoding="utf-8")


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
    digest, recorded = _check_hash(entry, file)
    unrecorded = None if recorded else (str(_record(entry)), f"{digest}  {file}\n")
    return Resolved(entry.model, str(_state_dict_file(entry, file, digest)), unrecorded=unrecorded)


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


def _record(entry: Released) -> Path:
    return cache_root() / f"{entry.id}.sha256"


def _recorded(record: Path) -> str | None:
    """The SHA-256 recorded at the entry's first load, None where none is; a record that is a link, unreadable or holds
    no SHA-256 (a write cut short by an older release) is one line naming it."""
    refuse_links(record.parent, (record.name,))
    try:
        text = record.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{record}: the SHA-256 recorded at the first load could not be read ({getattr(e, 'strerror', None) or e})"
                        ) from None
    found = re.match(r"([0-9a-f]{64})\s", text)
    if found is None:
        raise DataError(f"{record}: holds no SHA-256 (a record cut short): delete it, and the next load records the file's")
    return found.group(1)


def _check_hash(entry: Released, file: Path) -> tuple[str, bool]:
    """The file's SHA-256, checked against the release's or the one recorded at its first load; and whether it is held
    to one (else it is recorded once it has loaded: `Resolved.loaded`)."""
    digest = sha256_of(file)
    record = _record(entry)
    if entry.sha256:
        expected, said = entry.sha256, "the release publishes"
    else:
        expected, said = _recorded(record), f"its first load recorded in {record}"
        if expected is None:
            return digest, False
    if digest != expected:
        raise DataError(f"{file}: SHA-256 {digest}, but {expected} is the one {said}; refused (a changed or corrupt file), "
                        f"delete it to fetch it again{'' if entry.sha256 else f', or {record} if the release replaced it'}")
    return digest, True


def _state_dict_file(entry: Released, file: Path, digest: str) -> Path:
    """A file whose state dict sits under another key (CoN-CLIP's "model"), or whose LoRA halves are to be merged (DAC's,
    SVLC's), as a safetensors file open_clip's loader reads, written beside the hand-downloaded one. It records the size
    and SHA-256 of the file it was converted from, and is converted again when they are not the file's now: a replaced
    file keeps no modification time a copy can be trusted with (`cp -p`, `rsync -a` and `unzip` set an older one)."""
    if not entry.state_dict_key:
        return file
    from safetensors.torch import save_file

    from ..checkpoint import read_pickled

    out = cache_root() / entry.id / f"{file.stem}.{entry.state_dict_key}{'.merged' if entry.lora else ''}.safetensors"
    source = {SOURCE_SHA256: digest, SOURCE_SIZE: str(file.stat().st_size)}
    if _converted_from(out) == source:
        return out
    held = read_pickled(file)
    if not isinstance(held, dict) or not isinstance(held.get(entry.state_dict_key), dict):
        raise DataError(f"{file}: no state dict under {entry.state_dict_key!r}, where {entry.id}'s release keeps it")
    state = held[entry.state_dict_key]
    if entry.lora:
        from .lora import merge

        state = merge(state, entry.lora, entry.model, file)
    with atomic_path(out) as tmp:
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp), metadata=source)
    return out


def _converted_from(out: Path) -> dict[str, str] | None:
    """The source a converted file records (`SOURCE_SHA256`, `SOURCE_SIZE`); None for one that records none (written by
    an earlier release) or that cannot be read: either is converted again."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(out), framework="pt") as f:
            metadata = f.metadata() or {}
    except (SafetensorError, OSError):
        return None
    return {k: metadata[k] for k in (SOURCE_SHA256, SOURCE_SIZE) if k in metadata}


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
