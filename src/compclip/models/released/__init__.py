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
scores as `--model ViT-B-32-quickgelu --pretrained negclip.pth` does. An OpenAI fine-tune's id with `-gelu` after it
(`negclip-b32-gelu`, `GELU_SUFFIX`) loads the same file under open_clip's plain-GELU twin of its architecture (`ViT-B-32`
beside `ViT-B-32-quickgelu`): the activation the releases' own loaders build, and some papers' rows were scored with
(`compclip report --paper` says which). A weights file is checked against the SHA-256 the
release publishes, or, where it publishes none, against the one recorded at its first load
(`$HF_HUB_CACHE/compclip-released/<id>.sha256`): a file that changed is refused, naming both. The hash is recorded only
once the file has loaded (`Resolved.loaded`), so a download cut short, refused at its load, is never the one held to.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from pathlib import Path

from ...errors import CompclipError, DataError, MissingFileError, UsageError
from ...errors import absent_from_hub as hub_absent
from ...io import atomic_path, refuse_links, sha256_of
from ...text import did_you_mean

ROUTES = ("open_clip", "open_clip_hub", "open_clip_file", "transformers")
FOLDER = "compclip-released"  # under the Hugging Face cache: the hand-downloaded files and the recorded hashes
# what a converted file says of the file it was converted from (its safetensors metadata): reused only while they match
SOURCE_SHA256, SOURCE_SIZE = "compclip_source_sha256", "compclip_source_size"
HUB_CONFIG = "open_clip_config.json"  # an `hf-hub:` repository's architecture and preprocessing
OPEN_CLIP_WEIGHTS = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")  # what open_clip downloads, in its order
TRANSFORMERS_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
QUICKGELU = "-quickgelu"  # open_clip's architectures with QuickGELU: `ViT-B-32-quickgelu` beside its GELU twin `ViT-B-32`
GELU_SUFFIX = "-gelu"  # `<id>-gelu`: an entry's weights file under its architecture's GELU twin (`with_plain_gelu`)
# the code that named a release's keys, converted for the route that loads it (`Released.key_layout`): EVA-CLIP's into
# open_clip's EVA02, FG-CLIP's into transformers' CLIPModel
KEY_LAYOUTS = {"eva_clip": "open_clip_file", "fg_clip": "transformers"}
CONVERTED_FOLDER = "clip"  # under the entry's folder in the cache: a converted transformers folder


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
    key_layout: str | None = None  # the code that named the file's keys where not open_clip: "eva_clip" (renamed when converted)
    blip_score: str | None = None
    # the `hf-hub:` repository whose tokenizer the release's text was trained with, where not the model's own (CLIC's
    # CLIPS fine-tunes take CLIPS's), and the `tokenizer_mode` its open_clip_config.json must set (open_clip builds
    # CLIPS's tokens only under 'clips', plain BERT ones otherwise)
    tokenizer: str | None = None
    tokenizer_mode: str | None = None
    unavailable: str | None = None
    plain_gelu: bool = False  # set by `with_plain_gelu` (`<id>-gelu`), never by an entry's file

    @property
    def called(self) -> str:
        """The id the user gives for it: `<id>-gelu` under plain GELU, so that a line about its weights suggests a command
        that loads the same model."""
        return self.id + GELU_SUFFIX if self.plain_gelu else self.id

    @property
    def architecture(self) -> str | None:
        """The open_clip architecture its weights load under: the entry's, or its GELU twin for `<id>-gelu`."""
        return self.model.removesuffix(QUICKGELU) if self.plain_gelu else self.model

    @property
    def activation(self) -> str | None:
        """The activation it runs where the registry chooses one (an OpenAI fine-tune's): "quickgelu", or "gelu" as
        `<id>-gelu`; None for any other entry (its architecture's own)."""
        if self.plain_gelu:
            return "gelu"
        return "quickgelu" if self.loads_as == "open_clip_file" and self.model.endswith(QUICKGELU) else None


def _check(entry: Released, file: str) -> Released:
    """An entry is one route's, with what that route needs: a broken file is a bug of the package, said by name."""
    needs = {"open_clip": ("model", "pretrained", "hf_hub"), "open_clip_hub": ("model",), "transformers": ("model",),
             "open_clip_file": ("model",), None: ("unavailable",)}
    if entry.loads_as not in needs or file != f"{entry.id}.json":
        raise ValueError(f"released {file}: loads_as {entry.loads_as!r} is none of {ROUTES} or null, or the file is not named by its id")
    lacking = [k for k in needs[entry.loads_as] if not getattr(entry, k)]
    if entry.loads_as == "open_clip_file" and not (entry.hub_repo and entry.hub_file) and not (entry.url and entry.file and entry.get):
        lacking.append("hub_repo and hub_file, or url, file and get")
    if bool(entry.tokenizer) != bool(entry.tokenizer_mode) or (entry.tokenizer and not entry.tokenizer.startswith("hf-hub:")):
        lacking.append("tokenizer (an hf-hub: repository) and tokenizer_mode, both or neither")
    if entry.lora and not entry.state_dict_key:
        lacking.append("state_dict_key (a LoRA checkpoint is converted from where it keeps its weights)")
    if entry.plain_gelu:
        raise ValueError(f"released {file}: plain_gelu is what `{entry.id}{GELU_SUFFIX}` sets, never an entry's field")
    renamed_file = entry.loads_as == "open_clip_file"  # a file's renamed keys are converted from where it keeps its weights
    if entry.key_layout and (KEY_LAYOUTS.get(entry.key_layout) != entry.loads_as or renamed_file != bool(entry.state_dict_key)):
        lacking.append(f"a key_layout of its route's ({KEY_LAYOUTS}), and state_dict_key where a file is renamed")
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


def gelu_variant(entry: Released) -> str | None:
    """`<id>-gelu` where the entry takes it (a QuickGELU weights file of an OpenAI fine-tune, `with_plain_gelu`), else
    None: the id `compclip models` lists beside the entry's, for the papers' rows scored under plain GELU."""
    return f"{entry.id}{GELU_SUFFIX}" if entry.loads_as == "open_clip_file" and entry.model.endswith(QUICKGELU) else None


def is_released(name: str) -> bool:
    """Whether `name` is a registry id, or one with `-gelu` after it (and not a folder of that name, which `model_name`
    has made a path already)."""
    return (name in _entries() or name.removesuffix(GELU_SUFFIX) in _entries()) and not Path(name).exists()


def get_released(name: str) -> Released:
    """The entry whose id is `name`, or whose name is, case aside; `<id>-gelu` the entry under plain GELU
    (`with_plain_gelu`); an unknown one is an error naming the closest ids."""
    entries = _entries()
    if name in entries:
        return entries[name]
    if name.endswith(GELU_SUFFIX) and name.removesuffix(GELU_SUFFIX) in entries:
        return with_plain_gelu(entries[name.removesuffix(GELU_SUFFIX)])
    by_name = {e.name.casefold(): e for e in entries.values()}
    if name.casefold() in by_name:
        return by_name[name.casefold()]
    raise UsageError(f"no released checkpoint {name!r}{did_you_mean(name, entries, n=3)} (`compclip models` lists them)")


def with_plain_gelu(entry: Released) -> Released:
    """The entry's weights file loaded under its architecture's GELU twin (`negclip-b32-gelu` as `ViT-B-32`): fine-tunes
    of OpenAI's CLIP were trained with its QuickGELU, but the releases' own loaders (ARO's model_zoo for NegCLIP and
    CE-CLIP) build them as `ViT-B-32`, and the papers that scored them so published those numbers. The same file, its
    hash record and its conversion as the entry's; only the activation differs."""
    if gelu_variant(entry) is None:
        runs = f"loads as {entry.model}" if entry.loads_as else "cannot be loaded"
        raise UsageError(f"{entry.id}{GELU_SUFFIX}: {GELU_SUFFIX} loads the weights file of a QuickGELU entry (an OpenAI "
                         f"fine-tune's, as negclip-b32) under plain GELU; {entry.id} {runs}, and has no GELU variant")
    return replace(entry, plain_gelu=True)


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
    tokenizer: str | None = None  # the tokenizer's source where it is not the model's own (`Released.tokenizer`), checked

    def loaded(self) -> None:
        """Record the weights file's SHA-256 as its first load's, called once the model holds its weights: a file whose
        load was refused (cut short, holding code, another model's) is never recorded as the one later loads must match."""
        if self.unrecorded is not None:
            record, line = self.unrecorded
            with atomic_path(record) as tmp:
                tmp.write_text(line, encoding="utf-8")


def resolve(entry: Released, pretrained: str | None = None) -> Resolved:
    """The entry as compclip's loaders name it, its weights file fetched into the Hugging Face cache and its hash checked.
    `pretrained`: a copy of the weights the user has already, loaded in place of the entry's under its architecture (an
    `hf-hub:` repository's with the repository's open_clip_config.json beside it); a weights file is checked as above.
    A release tokenized with another repository's tokenizer (CLIPS's) names it, that repository's config checked."""
    resolved = _resolve_weights(entry, pretrained)
    return dataclasses.replace(resolved, tokenizer=_checked_tokenizer(entry)) if entry.tokenizer else resolved


def _resolve_weights(entry: Released, pretrained: str | None) -> Resolved:
    if entry.loads_as is None:
        raise UsageError(f"{entry.id} ({entry.name}) cannot be loaded: {entry.unavailable}")
    if pretrained and entry.loads_as == "transformers":
        raise UsageError(f"{entry.id} is a transformers model ({entry.model}): --pretrained {pretrained} applies to an open_clip entry")
    if pretrained and entry.loads_as == "open_clip":
        return Resolved(entry.model, str(_given_file(pretrained)))
    if pretrained and entry.loads_as == "open_clip_hub":
        return Resolved(f"local-dir:{_repository_copy(entry, _given_file(pretrained))}", pretrained)
    if entry.loads_as in ("open_clip", "open_clip_hub"):
        _fetch_hub_files(entry)
    if entry.key_layout == "fg_clip":
        return Resolved(str(_clip_folder(entry)))
    if entry.loads_as != "open_clip_file":
        return Resolved(entry.model, entry.pretrained, entry.blip_score)
    file = _given_file(pretrained) if pretrained else _fetch(entry)
    digest, recorded = _check_hash(entry, file)
    unrecorded = None if recorded else (str(_record(entry)), f"{digest}  {file}\n")
    return Resolved(entry.architecture, str(_state_dict_file(entry, file, digest)), unrecorded=unrecorded)


def _checked_tokenizer(entry: Released) -> str:
    """The entry's own tokenizer source (`Released.tokenizer`), its repository's open_clip_config.json fetched and read:
    one whose text_cfg does not set the entry's `tokenizer_mode` is refused in one line, for open_clip would build plain
    BERT tokens from it and every caption would be scored as the model never read one."""
    from huggingface_hub import hf_hub_download

    repo = entry.tokenizer.removeprefix("hf-hub:")
    try:
        config = Path(hf_hub_download(repo, HUB_CONFIG))
    except Exception as e:
        raise absent_from_hub(entry.id, f"{repo}/{HUB_CONFIG} (its tokenizer's)", e) from None
    try:
        mode = json.loads(config.read_text(encoding="utf-8"))["model_cfg"]["text_cfg"].get("tokenizer_mode")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        raise DataError(f"{config}: not an open_clip config with a model_cfg.text_cfg, where {entry.id}'s tokenizer is read from") from None
    if mode != entry.tokenizer_mode:
        raise DataError(f"{config}: model_cfg.text_cfg.tokenizer_mode is {mode!r}, not {entry.tokenizer_mode!r}: open_clip would tokenize "
                        f"{entry.id}'s text as plain BERT tokens, not as {entry.name} was trained (every score would change); refused: "
                        f"fetch {repo} anew, or set text_cfg.tokenizer_mode {entry.tokenizer_mode!r} in that config")
    return entry.tokenizer


def _clip_folder(entry: Released) -> Path:
    """FG-CLIP's repository as a folder of transformers' CLIPModel (`compclip.models.released.fg_clip`), in the cache
    beside the entry's other files: made once, and again when the repository's weights are not those it was made from
    (their size and SHA-256, recorded in its weights)."""
    from ..hf_folders import hub_snapshot
    from .fg_clip import make_clip_folder, source_weights

    _fetch_hub_files(entry)
    snapshot = hub_snapshot(entry.id, entry.model.removeprefix("hf:"))
    weights = source_weights(entry.id, snapshot)
    source = {SOURCE_SHA256: sha256_of(weights), SOURCE_SIZE: str(weights.stat().st_size)}
    out = cache_root() / entry.id / CONVERTED_FOLDER
    if _converted_from(out / "model.safetensors") != source:
        make_clip_folder(snapshot, weights, out, source)
    return out


def _given_file(pretrained: str) -> Path:
    file = Path(pretrained)
    if not file.is_file():
        raise MissingFileError(f"--pretrained {file}: no such file")
    return file


def _repository_copy(entry: Released, file: Path) -> Path:
    """The folder of a copy of an `hf-hub:` repository's weights file: its architecture is the repository's
    open_clip_config.json, which must lie beside it (as the Hub serves the two)."""
    if not (file.parent / HUB_CONFIG).is_file():
        raise MissingFileError(f"--pretrained {file}: {entry.id}'s architecture is its repository's {HUB_CONFIG}, and there is "
                               f"none beside the file (save {entry.model.removeprefix('hf-hub:')}'s {HUB_CONFIG} as "
                               f"{file.parent / HUB_CONFIG})")
    return file.parent


def offline_command(model: str, config_beside: bool = False) -> str:
    """The command that loads a copy of the weights the user has, with no download: the same for every route (an
    `hf-hub:` repository's architecture read from its open_clip_config.json beside the file)."""
    return f"--model {model} --pretrained FILE" + (f" ({HUB_CONFIG} beside it)" if config_beside else "")


def absent_from_hub(subject: str, what: str, error: Exception, command: str | None = None) -> CompclipError:
    """`errors.absent_from_hub`'s line, which for a registry id also points at `compclip models --fetch-list`."""
    listed = " (`compclip models --fetch-list` says what goes where)" if subject.removesuffix(GELU_SUFFIX) in _entries() else ""
    return hub_absent(subject, what, error, command, listed)


def _fetch_hub_files(entry: Released) -> None:
    """An open_clip tag's weights, or an `hf-hub:` repository's config and weights, into the Hugging Face cache before
    open_clip builds the model, each file under the first of its names the repository serves (as open_clip's download
    tries them): one line, naming the entry, where none can be had."""
    from huggingface_hub import hf_hub_download

    for repo, names in _hub_files(entry):
        for name in names:
            try:
                hf_hub_download(repo, name)
                break
            except Exception as e:
                failed = e
        else:
            command = offline_command(entry.id, config_beside=entry.loads_as == "open_clip_hub")
            raise absent_from_hub(entry.id, f"{repo}/{' or '.join(names)}", failed, command) from None


def _fetch(entry: Released) -> Path:
    """The entry's file: from its Hub repository through the Hugging Face cache (resumable), or where the user put it."""
    if entry.hub_repo:
        from huggingface_hub import hf_hub_download

        try:
            return Path(hf_hub_download(entry.hub_repo, entry.hub_file))
        except Exception as e:
            raise absent_from_hub(entry.called, f"{entry.hub_repo}/{entry.hub_file}", e, offline_command(entry.called)) from None
    path = hand_path(entry)
    if not path.is_file():
        raise MissingFileError(f"{entry.called}: {path} is not there. {entry.get} Save it as {path}, or load a copy kept elsewhere: "
                               f"{offline_command(entry.called)}")
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
    """A file whose state dict sits under another key (CoN-CLIP's "model"), whose LoRA halves are to be merged (DAC's,
    SVLC's) or whose keys another code named (FineCLIP's, EVA-CLIP's), as a safetensors file open_clip's loader reads,
    written beside the hand-downloaded one. It records the size and SHA-256 of the file it was converted from, and is
    converted again when they are not the file's now: a replaced file keeps no modification time a copy can be trusted
    with (`cp -p`, `rsync -a` and `unzip` set an older one)."""
    if not entry.state_dict_key:
        return file
    from safetensors.torch import save_file

    from ..checkpoint import read_pickled

    converted = "".join(f".{step}" for step in ("merged" if entry.lora else None, entry.key_layout) if step)
    out = cache_root() / entry.id / f"{file.stem}.{entry.state_dict_key}{converted}.safetensors"
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
    if entry.key_layout == "eva_clip":
        from .eva_clip import to_open_clip

        state = to_open_clip(state, file)
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


def _hub_files(entry: Released) -> list[tuple[str, tuple[str, ...]]]:
    """Each Hub file the entry loads, as (repository, the names it may have, the one fetched first first)."""
    if entry.loads_as == "open_clip":
        return [(entry.hf_hub, OPEN_CLIP_WEIGHTS)]
    if entry.loads_as == "open_clip_hub":
        repo = entry.model.removeprefix("hf-hub:")
        tokenizer = entry.tokenizer.removeprefix("hf-hub:") if entry.tokenizer else repo
        return [(repo, (HUB_CONFIG,)), (repo, OPEN_CLIP_WEIGHTS), *([(tokenizer, (HUB_CONFIG,))] if tokenizer != repo else [])]
    if entry.loads_as == "transformers":
        return [(entry.model.removeprefix("hf:"), TRANSFORMERS_WEIGHTS)]
    return [(entry.hub_repo, (entry.hub_file,))] if entry.hub_repo else []


def _in_cache(repo: str, names: tuple[str, ...]) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return any(isinstance(try_to_load_from_cache(repo, name), str) for name in names)


def cached(entry: Released) -> bool:
    """Whether the entry's weights are on this machine already (each Hub file it loads in the Hugging Face cache, a
    hand-downloaded file where it is looked for)."""
    if entry.loads_as == "open_clip_file" and entry.url:
        return hand_path(entry).is_file()
    return all(_in_cache(repo, names) for repo, names in _hub_files(entry))


def fetch_list(entry: Released) -> list[tuple[str, Path]]:
    """What the entry lacks on this machine, as (where to download it, where compclip looks for it): a Hub file at
    huggingface_hub's cache path, its revision the one the repository's refs/main names once downloaded (`<revision>`
    until then), so that a cache filled on a machine with internet and copied here is found; a hand download under the
    name compclip looks for. A transformers model is its whole repository (config, weights and processor files)."""
    if entry.loads_as is None:
        return []
    if entry.loads_as == "open_clip_file" and entry.url:
        return [] if hand_path(entry).is_file() else [(entry.url, hand_path(entry))]
    from huggingface_hub import constants

    lacking = []
    for repo, names in _hub_files(entry):
        if _in_cache(repo, names):
            continue
        folder = Path(constants.HF_HUB_CACHE) / f"models--{repo.replace('/', '--')}"
        refs = folder / "refs" / "main"
        snapshot = folder / "snapshots" / (refs.read_text().strip() if refs.is_file() else "<revision>")
        if entry.loads_as == "transformers":
            lacking.append((f"https://huggingface.co/{repo}", snapshot))
        else:
            lacking.append((f"https://huggingface.co/{repo}/resolve/main/{names[0]}", snapshot / names[0]))
    return lacking


__all__ = ["GELU_SUFFIX", "HUB_CONFIG", "OPEN_CLIP_WEIGHTS", "Released", "Resolved", "absent_from_hub", "cached", "fetch_list",
           "gelu_variant", "get_released", "hand_path", "is_released", "list_released", "offline_command", "resolve", "with_plain_gelu"]
