"""compclip checkpoint folders, safe weight loading, and export to plain open_clip files.

A checkpoint is a folder: `model.safetensors` (the open_clip state dict), `config.json`
(everything needed to rebuild the model plus how it was trained) and `open_clip_config.json`
(so `open_clip.create_model_and_transforms('local-dir:FOLDER')` loads it too).
Nothing here ever unpickles code: safetensors, or `torch.load(weights_only=True)`.
"""
from __future__ import annotations

import io
import json
import logging
import pickle
import warnings
import zipfile
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import open_clip
import torch
from open_clip.factory import load_state_dict as open_clip_load_state_dict
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from .. import __version__
from ..errors import CompclipError, DataError, MissingFileError, NonFiniteError, UsageError
from ..io import atomic_dir, sha256_of, write_json
from . import bundled  # noqa: F401  (registers the bundled configs with open_clip and timm: a checkpoint's model_name may name one)

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
OPEN_CLIP_CONFIG_NAME = "open_clip_config.json"
STATE_NAME = "training_state.pt"  # optimizer, scheduler, RNG and data position, for resuming
LATEST_NAME = "latest"  # OUT/checkpoints/latest: a text file naming the run's newest complete step folder
BEST_NAME = "best"  # OUT/checkpoints/best: the model folder of the best evaluation, with best.json beside its config
MODULES_NAME = "method.safetensors"  # the modules a method owns (not part of the open_clip model)
SPEC_ATTR = "compclip_spec"  # set on every model load_model returns
DIGEST_ATTR = "compclip_weights_sha256"  # the SHA-256 of the weights file load_model read, where it read one
_SPEC_KEYS = ("model_name", "model_cfg", "preprocess_cfg", "tokenizer", "pretrained")
log = logging.getLogger("compclip.models")


class CheckpointMismatchError(DataError):
    """A weights file does not fit the architecture it is loaded into."""

    def __init__(self, file: Path, missing: list[str], unexpected: list[str], mismatched: list[tuple]):
        self.file, self.missing, self.unexpected, self.mismatched = file, missing, unexpected, mismatched

        def show(keys: list) -> str:
            head = ", ".join(str(k) for k in keys[:10])
            return head + (f", ... ({len(keys) - 10} more)" if len(keys) > 10 else "")

        lines = [f"{file} does not fit this architecture:"]
        if missing:
            lines.append(f"  {len(missing)} missing keys: {show(missing)}")
        if unexpected:
            lines.append(f"  {len(unexpected)} unexpected keys: {show(unexpected)}")
        if mismatched:
            lines.append(f"  {len(mismatched)} shape mismatches (key, file, model): {show(mismatched)}")
        super().__init__("\n".join(lines))


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The bare model under DDP (`.module`) or torch.compile (`._orig_mod`) wrappers."""
    while True:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if not isinstance(inner, torch.nn.Module):
            return model
        model = inner


def model_spec(model: torch.nn.Module) -> dict[str, Any]:
    spec = getattr(unwrap(model), SPEC_ATTR, None)
    if spec is None:
        raise ValueError(
            "this model carries no compclip spec: create it with compclip.models.load_model "
            "so that its open_clip name and config can be saved with it"
        )
    return spec


def weights_file(model: str | Path, pretrained: str | None = None) -> Path | None:
    """The weights file a model name loads: a checkpoint folder's, or a `pretrained` file; None for tags and hub ids."""
    for file in (Path(model) / WEIGHTS_NAME, Path(pretrained) if pretrained else None):
        if file is not None and file.is_file():
            return file
    return None


def weights_sha256(model: torch.nn.Module) -> str | None:
    """The SHA-256 of the weights file this model was loaded from (a checkpoint folder's, or a `pretrained` file), as it
    was read: it names these exact weights in results and model cards. None for open_clip tags, hub ids and random
    weights."""
    return getattr(unwrap(model), DIGEST_ATTR, None)


class RunFolder:
    """A training run's folder, the one place its layout is spelled: `checkpoints/step_NNNNNNN` (a checkpoint folder each,
    with `training_state.pt` to resume), `checkpoints/latest` (a text file naming the newest complete step) and
    `checkpoints/best`; `log.jsonl`, `train.log` and `config.json` beside them."""

    CHECKPOINTS = "checkpoints"  # the folder of a run's checkpoints

    def __init__(self, out: str | Path):
        self.out = Path(out)
        self.checkpoints = self.out / self.CHECKPOINTS
        self.pointer, self.best = self.checkpoints / LATEST_NAME, self.checkpoints / BEST_NAME

    @classmethod
    def around(cls, pointer: Path) -> RunFolder:
        """The run whose `latest` pointer is `pointer`, its checkpoints the folder beside it (named so or not)."""
        run = cls(pointer.parent.parent)
        run.checkpoints, run.pointer, run.best = pointer.parent, pointer, pointer.parent / BEST_NAME
        return run

    def unsaved(self) -> bool:
        """A run folder before its first checkpoint: its train.log is written, its checkpoints folder not yet."""
        return (self.out / "train.log").is_file() and not self.checkpoints.exists()

    def step(self, n: int) -> Path:
        return self.checkpoints / f"step_{n:07d}"

    @staticmethod
    def step_number(checkpoint: Path) -> int | None:
        """The step a run's checkpoint folder holds (`OUT/checkpoints/step_0000300`: 300), None for any other path."""
        digits = checkpoint.name.removeprefix("step_")
        in_run = checkpoint.parent.name == RunFolder.CHECKPOINTS and checkpoint.name.startswith("step_")
        return int(digits) if in_run and digits.isdigit() else None

    def steps(self) -> list[Path]:
        """The step folders there, oldest first."""
        return sorted(self.checkpoints.glob("step_*"))

    def whole(self) -> list[Path]:
        """The step folders holding every file a model loads from, oldest first: not those `--keep` emptied of their
        own files, nor one cut short by a copy."""
        return [s for s in self.steps() if all((s / name).is_file() for name in (CONFIG_NAME, WEIGHTS_NAME, OPEN_CLIP_CONFIG_NAME))]

    def latest(self) -> Path | None:
        """The newest complete checkpoint, as the pointer names it (None before the first)."""
        return self.checkpoints / self.pointer.read_text(encoding="utf-8").strip() if self.pointer.is_file() else None

    @staticmethod
    def holding(checkpoint: Path) -> Path:
        """The run folder a checkpoint folder belongs to (the folder itself where it is not a run's)."""
        return checkpoint.parent.parent if checkpoint.parent.name == RunFolder.CHECKPOINTS else checkpoint.parent


def checkpoint_folder(path: str | Path) -> Path:
    """The checkpoint folder `path` means, one rule for `load_model` and so for `eval`, `export` and `attention`: a
    checkpoint folder (a step's, `checkpoints/best`) is itself; a run's `checkpoints/latest` pointer, its `checkpoints`
    folder or the run folder mean the step the pointer names, the run's newest (said). A pointer that is missing, empty
    or names a step that is gone (removed by hand on a shared disk, or copied without it) means the newest whole step
    there, said in one warning: a job that asked for the run's newest checkpoint gets it rather than a refusal."""
    path = Path(path)
    for pointer in (path, path / LATEST_NAME, RunFolder(path).pointer):
        if pointer.name == LATEST_NAME and pointer.is_file():
            return _newest(path, pointer)
    run = RunFolder(path)
    if path.name == RunFolder.CHECKPOINTS and path.is_dir() and not (path / CONFIG_NAME).is_file():
        return _newest(path, path / LATEST_NAME)
    if run.checkpoints.is_dir():
        return _newest(path, run.pointer)
    if run.unsaved():
        raise MissingFileError(f"{path}: a run folder with no checkpoint yet (training has not saved one)")
    return path


def _newest(path: Path, pointer: Path) -> Path:
    """The step `pointer` names where it is there, else the newest whole step beside it (said), else a refusal."""
    named = pointer.read_text(encoding="utf-8").strip() if pointer.is_file() else ""
    target = pointer.parent / named
    if named and target.is_dir() and any((target / name).exists() for name in (CONFIG_NAME, WEIGHTS_NAME)):
        log.info("%s: the run's newest checkpoint, %s", path, target)  # a damaged one is named by check_checkpoint_folder
        return target
    why = (f"{pointer} names {named}, which is gone" if named else f"{pointer} is empty" if pointer.is_file()
           else f"{pointer.parent} has no {LATEST_NAME} pointer")
    whole = RunFolder.around(pointer).whole()
    if not whole:
        raise MissingFileError(f"{path}: {why}, and no whole checkpoint is there (training has not saved one, or they were "
                               "removed)")
    log.warning("%s: loading the newest whole checkpoint, %s", why, whole[-1])
    return whole[-1]


def model_name(name: str | Path) -> str:
    """A model's name as `load_model` takes it, a run folder or its `latest` pointer made the checkpoint folder it means
    (`checkpoint_folder`); open_clip names, tags and hub ids as they are."""
    return str(name) if ":" in str(name) or not Path(name).exists() else str(checkpoint_folder(name))


RUN_OPTIONS = ("train_data", "save_every")  # keys of a run's config.json (its options), never of a checkpoint's


def refuse_unsaved_run(folder: Path, options: dict[str, Any]) -> None:
    """A run folder whose config.json is the run's options and that has no checkpoints/ yet: one line saying training
    has saved nothing and what to do, not the run's record read as a checkpoint's ("missing keys"). A run of this
    compclip is told by its train.log (`RunFolder.unsaved`); this one by its config.json alone (copied without the rest,
    or written by an earlier compclip)."""
    if not RunFolder(folder).checkpoints.exists() and all(key in options for key in RUN_OPTIONS):
        raise MissingFileError(f"{folder}: a run folder with no checkpoint yet (its {CONFIG_NAME} holds the run's options, and "
                               f"training has saved no checkpoint): use it once {RunFolder.CHECKPOINTS}/ holds one (this "
                               f"run saves every {options['save_every']} steps), or give a checkpoint folder")


def read_config(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / CONFIG_NAME
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MissingFileError(f"{path}: not a compclip checkpoint folder (no {CONFIG_NAME})") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: unreadable JSON: {e}") from None
    missing = [k for k in _SPEC_KEYS[:4] if k not in config]
    if missing and "model_type" in config:
        raise UsageError(f"{path}: a transformers model's config (model_type {config['model_type']!r}), not a compclip "
                         f"checkpoint's: `compclip eval --model {Path(folder)}` scores it; training, export and the other "
                         "commands take open_clip models")
    if missing:
        refuse_unsaved_run(Path(folder), config)
        raise DataError(f"{path}: missing keys {missing}")
    return config


# What a checkpoint may change of its named architecture (open_clip's force_* arguments): everything else must agree.
FORCEABLE = {"quick_gelu", "text_cfg.context_length", "vision_cfg.image_size", "vision_cfg.patch_dropout", "custom_text"}


def _flat(cfg: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in cfg.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def check_checkpoint_folder(folder: Path) -> dict[str, Any]:
    """The folder's config.json, once every file a checkpoint needs is there and its parts agree; else one line naming
    the file and what is wrong."""
    if not folder.is_dir():
        raise MissingFileError(f"{folder}: no such folder (a compclip checkpoint is a folder)")
    if not (folder / CONFIG_NAME).is_file():
        holds = f" (it holds {WEIGHTS_NAME}: the config.json written beside it is gone)" if (folder / WEIGHTS_NAME).is_file() else ""
        raise MissingFileError(f"{folder}: a folder, but not a compclip checkpoint: no {CONFIG_NAME}{holds}")
    config = read_config(folder)
    for needed in (WEIGHTS_NAME, OPEN_CLIP_CONFIG_NAME):
        if not (folder / needed).is_file():
            raise MissingFileError(f"{folder / needed}: missing from the checkpoint folder (written with {CONFIG_NAME}; copy the "
                                   "whole folder)")
    try:
        written = json.loads((folder / OPEN_CLIP_CONFIG_NAME).read_text(encoding="utf-8"))["model_cfg"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise DataError(f"{folder / OPEN_CLIP_CONFIG_NAME}: unreadable ({type(e).__name__}: {e})") from None
    if written != config["model_cfg"]:
        raise DataError(f"{folder}: {CONFIG_NAME} and {OPEN_CLIP_CONFIG_NAME} describe different architectures: one was edited")
    named = open_clip.get_model_config(config["model_name"]) if ":" not in config["model_name"] else None
    if named is not None:
        ours, theirs = _flat(config["model_cfg"]), _flat(named)
        differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k) and k not in FORCEABLE)
        if differ:
            raise DataError(f"{folder / CONFIG_NAME}: model_name {config['model_name']!r} does not match the folder's architecture "
                            f"({', '.join(differ[:5])} differ): model_name was edited, or names another model")
    _refuse_another_context_length(folder, config)
    return config


TEXT_POSITIONS = ("positional_embedding", "text.positional_embedding")  # open_clip's text towers: CLIP's, CustomTextCLIP's


def _text_positions(file: Path) -> tuple[str, int] | None:
    """(key, length) of the weights' text positional embedding, read from the file's header alone; None for a text tower
    without one of open_clip's (a Hugging Face tower) or a header that does not read (the loader says why)."""
    try:
        with safe_open(str(file), framework="pt") as weights:
            key = next((k for k in TEXT_POSITIONS if k in weights.keys()), None)  # noqa: SIM118 (no __contains__)
            return (key, weights.get_slice(key).get_shape()[0]) if key else None
    except (SafetensorError, OSError):
        return None


def _refuse_another_context_length(folder: Path, config: dict[str, Any]) -> None:
    """A tokenizer of another context length than the text tower was trained at still runs (the tower slices its
    positional embedding to the tokens' length) and scores, every number changed: refused, the weights' length the truth
    and open_clip_config.json's (what `local-dir:` loads with) named beside it."""
    said = config["tokenizer"].get("context_length") if isinstance(config["tokenizer"], dict) else None
    written = config["model_cfg"].get("text_cfg", {}).get("context_length", open_clip.tokenizer.DEFAULT_CONTEXT_LENGTH)
    positions = _text_positions(folder / WEIGHTS_NAME)
    if said == (positions[1] if positions else written):
        return
    weights = f"the weights' {positions[0]} holds {positions[1]} positions and " if positions else ""
    raise DataError(f"{folder / CONFIG_NAME}: tokenizer.context_length is {said}, but {weights}{OPEN_CLIP_CONFIG_NAME} has "
                    f"text_cfg.context_length {written}: one was edited (every caption would be cut or padded to a length the "
                    "model was not trained at)")


def save_checkpoint(model: torch.nn.Module, folder: str | Path, state: dict[str, Any] | None = None,
                    modules: dict[str, torch.Tensor] | None = None, **metadata: Any) -> Path:
    """Write `model` to `folder` atomically, with `metadata` (method, training arguments, step...).

    `state`, a trainer's resumable state (tensors and plain values only), goes to `training_state.pt`;
    `modules`, the state dict of the modules a method owns, to `method.safetensors`, named in `config.json`.
    """
    model = unwrap(model)
    spec = model_spec(model)
    clash = sorted(set(metadata) & {"compclip_version", "state", "method_weights", *_SPEC_KEYS})
    if clash:
        raise ValueError(f"metadata keys {clash} are reserved for the model spec")
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    with atomic_dir(folder) as tmp:
        save_file(tensors, tmp / WEIGHTS_NAME, metadata={"format": "pt"})
        write_json(tmp / OPEN_CLIP_CONFIG_NAME, {"model_cfg": spec["model_cfg"], "preprocess_cfg": spec["preprocess_cfg"]})
        if modules:
            save_file({k: v.detach().to("cpu").contiguous() for k, v in modules.items()}, tmp / MODULES_NAME)
            metadata = {**metadata, "method_weights": MODULES_NAME}
        write_json(tmp / CONFIG_NAME, {"compclip_version": __version__, **spec, **metadata})
        if state is not None:
            torch.save(state, tmp / STATE_NAME)
    return Path(folder)


def remove_checkpoint(folder: str | Path) -> list[str]:
    """Delete the files `save_checkpoint` writes, and `folder` if nothing else is in it; the names of anything else (an
    export or results a user put there) are returned, and those stay with their folder."""
    folder = Path(folder)
    for name in (CONFIG_NAME, WEIGHTS_NAME, OPEN_CLIP_CONFIG_NAME, STATE_NAME, MODULES_NAME):
        (folder / name).unlink(missing_ok=True)
    foreign = sorted(entry.name for entry in folder.iterdir())
    if not foreign:
        folder.rmdir()
    return foreign


@contextmanager
def _reading(file: Path) -> Iterator[None]:
    """Turn the ways a weights file can be unreadable into one clear error naming it."""
    if not file.is_file():
        raise MissingFileError(f"{file}: no such weights file")
    try:
        yield
    except pickle.UnpicklingError as e:
        if not _pickled(file):
            raise DataError(f"{file}: not a readable weights file: neither torch.save's archive nor a pickle (another file saved "
                            "under its name, or a download's error page)") from None
        raise DataError(f"{file}: refused: it holds pickled objects that are not plain tensors ({_unpickler_said(e)})") from None
    except (SafetensorError, EOFError, OSError) as e:
        raise DataError(f"{file}: not a readable weights file ({type(e).__name__}: {e})") from None


def _pickled(file: Path) -> bool:
    """Whether `file` is what torch.save writes (a zip archive, or a pickle: protocol 2 and up open with 0x80), so that
    the unpickler's refusal of it means objects other than tensors, not a file of something else."""
    with open(file, "rb") as f:
        first = f.read(1)
    return first == b"\x80" or zipfile.is_zipfile(file)


def _unpickler_said(e: pickle.UnpicklingError) -> str:
    """What torch's `weights_only` unpickler refused, in one line: its message is a page of advice around the line that
    names the object ("WeightsUnpickler error: Unsupported global: GLOBAL print ...")."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    named = next((line.removeprefix("WeightsUnpickler error: ") for line in lines if line.startswith("WeightsUnpickler error: ")),
                 lines[0] if lines else type(e).__name__)
    return named.split(" Please use ")[0]


# What OpenAI's TorchScript archives hold besides weights; open_clip's attention mask is a buffer a scripted model keeps
OPENAI_EXTRAS = ("input_resolution", "context_length", "vocab_size")
_BUFFERS_NOT_WEIGHTS = ("attn_mask",)


def is_torchscript(file: Path) -> bool:
    """A TorchScript archive (OpenAI's CLIP files, `torch.jit.save`): a zip holding compiled code. A `.safetensors` file is
    never one: it is read as safetensors or refused."""
    if file.suffix == ".safetensors":
        return False
    try:
        with zipfile.ZipFile(file) as z:
            return any("/code/__torch__/" in n for n in z.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def _torchscript_code(file: Path) -> str:
    with zipfile.ZipFile(file) as z:
        return "\n".join(z.read(n).decode("utf-8", "replace") for n in z.namelist() if "/code/__torch__/" in n and n.endswith(".py"))


class _Scripted:
    """A TorchScript object read as data: `attributes` is what the archive stores for it; none of its code runs."""

    qualname = "__torch__"

    def __setstate__(self, state: Any) -> None:
        self.attributes = state


class _TorchScriptData(pickle.Unpickler):
    """`data.pkl` of a TorchScript archive, unpickled without `torch.jit.load`: scripted classes become `_Scripted` records
    (their `__setstate__`, compiled code that `torch.jit.load` would run, never runs), tensors are rebuilt from the
    archive's storages, and any other global is refused."""

    _ALLOWED: ClassVar[dict[tuple[str, str], Any]] = {("torch._utils", "_rebuild_tensor_v2"): torch._utils._rebuild_tensor_v2,
                ("torch._utils", "_rebuild_parameter"): torch._utils._rebuild_parameter,
                ("collections", "OrderedDict"): OrderedDict,
                # TorchScript's typed lists and type tags: each returns the value it is given (torch/jit/_pickle.py)
                **{("torch.jit._pickle", f"build_{kind}list"): lambda values: values for kind in ("int", "double", "bool", "tensor")},
                ("torch.jit._pickle", "restore_type_tag"): lambda value, _type: value}

    def __init__(self, archive: zipfile.ZipFile, prefix: str):
        super().__init__(io.BytesIO(archive.read(f"{prefix}data.pkl")))
        self.archive, self.prefix = archive, prefix

    def find_class(self, module: str, name: str) -> Any:
        if module == "__torch__" or module.startswith("__torch__."):
            return type(name, (_Scripted,), {"qualname": f"{module}.{name}"})
        if module == "torch" and name.endswith("Storage") and isinstance(getattr(torch, name, None), type):
            return getattr(torch, name)
        if (module, name) in self._ALLOWED:
            return self._ALLOWED[(module, name)]
        raise pickle.UnpicklingError(f"a TorchScript archive holding {module}.{name}, which is not a tensor")

    def persistent_load(self, pid: Any) -> Any:
        kind, storage_type, key, _location, _numel = pid
        if kind != "storage":
            raise pickle.UnpicklingError(f"a TorchScript archive with a {kind!r} record")
        raw = torch.UntypedStorage.from_buffer(self.archive.read(f"{self.prefix}data/{key}"), dtype=torch.uint8)
        with warnings.catch_warnings():  # torch.load builds the same TypedStorage for _rebuild_tensor_v2
            warnings.simplefilter("ignore", UserWarning)
            return torch.storage.TypedStorage(wrap_storage=raw, dtype=storage_type.dtype, _internal=True)


def _scripted_tensors(obj: _Scripted, prefix: str, out: dict[str, torch.Tensor]) -> None:
    if not isinstance(obj.attributes, dict):
        raise pickle.UnpicklingError(f"{obj.qualname} at {prefix.rstrip('.') or 'the top'} is stored by its own __getstate__, "
                                     "to be rebuilt by scripted code (__setstate__) that compclip does not run")
    for name, value in obj.attributes.items():
        if isinstance(value, torch.Tensor):
            out[prefix + name] = value
        elif isinstance(value, _Scripted):
            _scripted_tensors(value, f"{prefix}{name}.", out)


def read_torchscript(file: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a TorchScript archive's modules, by their state-dict names, read as `torch.load(weights_only=True)`
    reads a state dict: nothing in the archive runs (`torch.jit.load` would run its scripted `__setstate__` methods)."""
    with zipfile.ZipFile(file) as archive:
        found = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(found) != 1:
            raise pickle.UnpicklingError("a TorchScript archive without one data.pkl")
        top = _TorchScriptData(archive, found[0].removesuffix("data.pkl")).load()
    if not isinstance(top, _Scripted):
        raise pickle.UnpicklingError("a TorchScript archive whose data is not a scripted module")
    state: dict[str, torch.Tensor] = {}
    _scripted_tensors(top, "", state)
    return state


def read_state_dict(file: str | Path) -> dict[str, torch.Tensor]:
    """Tensors of a `.safetensors`, `.pt`, `.pth` or `.bin` file, refusing pickled code, or of a TorchScript archive
    (its weights only, read without running its code: OpenAI's extras and buffers that are not weights are dropped)."""
    file = Path(file)
    try:
        with _reading(file):
            if is_torchscript(file):
                state = read_torchscript(file)
                return {k: v for k, v in state.items() if k not in OPENAI_EXTRAS and k.rsplit(".", 1)[-1] not in _BUFFERS_NOT_WEIGHTS}
            return open_clip_load_state_dict(str(file), weights_only=True)
    except RuntimeError as e:
        raise DataError(f"{file}: not a readable weights file (RuntimeError: {e})") from None


def read_pickled(file: str | Path) -> Any:
    """What a `torch.save` file holds, read as tensors and plain containers only (`weights_only`): a file cut short, or
    one holding pickled code, is one `DataError` naming it, never torch's traceback."""
    file = Path(file)
    try:
        with _reading(file):
            return torch.load(str(file), map_location="cpu", weights_only=True)
    except RuntimeError as e:  # torch's zip reader on a cut file: "PytorchStreamReader failed reading zip archive: ..."
        said = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"{file}: not a readable weights file, cut short or damaged (RuntimeError: {said})") from None


def trained_activation(file: str | Path) -> tuple[bool | None, str]:
    """Whether the weights in `file` were trained with QuickGELU (True) or GELU (False), and how that is known; None
    where the file does not say (a plain state dict carries no activation)."""
    file = Path(file)
    if is_torchscript(file):
        code = _torchscript_code(file)
        if "QuickGELU" in code:
            return True, "an OpenAI-format TorchScript archive (its code runs QuickGELU)"
        if "gelu" in code:
            return False, "a TorchScript archive whose code runs GELU"
        return None, ""
    if file.suffix == ".safetensors":
        try:
            with safe_open(str(file), "pt") as f:
                named = (f.metadata() or {}).get("open_clip_model")
        except (SafetensorError, OSError):
            return None, ""
        cfg = open_clip.get_model_config(named) if named and ":" not in named else None
        if cfg is not None:
            return bool(cfg.get("quick_gelu", False)), f"written from {named} (its metadata says)"
        return None, ""
    try:
        keys = torch.load(str(file), map_location="cpu", weights_only=True, mmap=True).keys()
    except Exception:  # unreadable files are reported by the loader, with their reason
        return None, ""
    if any(k in keys for k in OPENAI_EXTRAS):
        return True, "an OpenAI-format state dict (it holds input_resolution, context_length, vocab_size: OpenAI's models run QuickGELU)"
    return None, ""


def load_weights(model: torch.nn.Module, file: str | Path) -> str:
    """Load an open_clip state dict strictly, reading the file once; a mismatch names every
    missing, unexpected and wrongly shaped key, and a weight holding NaN or inf is refused. Returns the SHA-256 of the
    file as loaded: a file replaced while it was read (a run rewriting `checkpoints/best`) is read again."""
    file = Path(file)
    for _ in range(3):
        try:
            with _reading(file):
                before, digest = _identity(file), sha256_of(file)
            if is_torchscript(file):
                model.load_state_dict(read_state_dict(file), strict=True)
            else:
                refuse_unfloat_weights(model, file)
                with _reading(file):
                    open_clip.load_checkpoint(model, str(file), strict=True, weights_only=True)
            bad = first_nonfinite(model.state_dict())
            if bad is not None:
                raise NonFiniteError(f"{file}: weight {bad} holds NaN or inf: refused (a model with it scores nothing)")
        except (RuntimeError, AttributeError, KeyError, ValueError) as e:  # open_clip's loader fails in several ways on foreign weights
            if isinstance(e, CompclipError):
                raise
            state, expected = read_state_dict(file), model.state_dict()  # only on failure: say why
            missing, unexpected = sorted(expected.keys() - state.keys()), sorted(state.keys() - expected.keys())
            mismatched = [(k, tuple(state[k].shape), tuple(expected[k].shape)) for k in sorted(expected.keys() & state.keys())
                          if state[k].shape != expected[k].shape]
            if missing or unexpected or mismatched:
                raise CheckpointMismatchError(file, missing=missing, unexpected=unexpected, mismatched=mismatched) from None
            raise DataError(f"{file}: not a readable weights file ({type(e).__name__}: {e})") from None
        if _identity(file) == before:
            return digest
    raise DataError(f"{file}: replaced three times while it was read; run again once nothing rewrites it")


FLOATS = ("F64", "F32", "F16", "BF16")  # safetensors' names of floating-point dtypes


def refuse_unfloat_weights(model: torch.nn.Module, file: Path) -> None:
    """A `.safetensors` file whose tensors for the model's floating-point weights are integers or booleans (a quantized
    or foreign export), refused from its header before anything is read: loading would cast them to floats and score
    what they have become."""
    if file.suffix != ".safetensors":
        return
    floating = {name for name, tensor in model.state_dict().items() if tensor.is_floating_point()}
    try:
        with _reading(file), safe_open(str(file), framework="pt") as weights:
            typed = ((k, weights.get_slice(k).get_dtype()) for k in weights.keys() if k in floating)  # noqa: SIM118 (no __iter__)
            found = next(((k, dtype) for k, dtype in typed if dtype not in FLOATS), None)
    except SafetensorError:
        return  # not a readable header: the loader says so, with its reasons
    if found is not None:
        raise DataError(f"{file}: weight {found[0]} is {found[1]}, not floating point: a quantized or foreign export, refused "
                        "(cast to floats it would be scored as something it is not)")


def _identity(file: Path) -> tuple[int, ...]:
    """What changes when a file is replaced (a rename: another inode) or rewritten in place (size, modification time)."""
    try:
        st = file.stat()
    except FileNotFoundError:
        return ()
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def first_nonfinite(tensors: Mapping[str, torch.Tensor]) -> str | None:
    """The name of the first tensor (of a state dict) that holds NaN or inf, or None."""
    return next((name for name, tensor in tensors.items() if tensor.is_floating_point() and not torch.isfinite(tensor).all()), None)


def load_module_weights(method: torch.nn.Module, folder: str | Path) -> None:
    """Restore the modules a method owns from a checkpoint folder, strictly (nothing to do for a method without any)."""
    file = Path(folder) / MODULES_NAME
    if not method.state_dict() and not file.is_file():
        return
    with _reading(file):
        missing, unexpected = method.load_state_dict(load_file(file), strict=False)
    if missing or unexpected:
        raise CheckpointMismatchError(file, sorted(missing), sorted(unexpected), [])
