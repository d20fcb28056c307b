"""compclip checkpoint folders, safe weight loading, and export to plain open_clip files.

A checkpoint is a folder: `model.safetensors` (the open_clip state dict), `config.json`
(everything needed to rebuild the model plus how it was trained) and `open_clip_config.json`
(so `open_clip.create_model_and_transforms('local-dir:FOLDER')` loads it too).
Nothing here ever unpickles code: safetensors, or `torch.load(weights_only=True)`.
"""
from __future__ import annotations

import hashlib
import json
import pickle
import warnings
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import open_clip
import torch
from open_clip.factory import load_state_dict as open_clip_load_state_dict
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from .. import __version__
from ..errors import DataError, MissingFileError, NonFiniteError
from ..io import atomic_dir, write_json

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
OPEN_CLIP_CONFIG_NAME = "open_clip_config.json"
STATE_NAME = "training_state.pt"  # optimizer, scheduler, RNG and data position, for resuming
MODULES_NAME = "method.safetensors"  # the modules a method owns (not part of the open_clip model)
SPEC_ATTR = "compclip_spec"  # set on every model load_model returns
_SPEC_KEYS = ("model_name", "model_cfg", "preprocess_cfg", "tokenizer", "pretrained")


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


def read_config(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / CONFIG_NAME
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MissingFileError(f"{path}: not a compclip checkpoint folder (no {CONFIG_NAME})") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: unreadable JSON: {e}") from None
    missing = [k for k in _SPEC_KEYS[:4] if k not in config]
    if missing:
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
    return config


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
        raise DataError(f"{file}: refused: it holds pickled objects that are not plain tensors ({e})") from None
    except (SafetensorError, EOFError, OSError) as e:
        raise DataError(f"{file}: not a readable weights file ({type(e).__name__}: {e})") from None


# What OpenAI's TorchScript archives hold besides weights; open_clip's attention mask is a buffer a scripted model keeps
OPENAI_EXTRAS = ("input_resolution", "context_length", "vocab_size")
_BUFFERS_NOT_WEIGHTS = ("attn_mask",)


def is_torchscript(file: Path) -> bool:
    """A TorchScript archive (OpenAI's CLIP files, `torch.jit.save`): a zip holding compiled code."""
    try:
        with zipfile.ZipFile(file) as z:
            return any("/code/__torch__/" in n for n in z.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def _torchscript_code(file: Path) -> str:
    with zipfile.ZipFile(file) as z:
        return "\n".join(z.read(n).decode("utf-8", "replace") for n in z.namelist() if "/code/__torch__/" in n and n.endswith(".py"))


def read_state_dict(file: str | Path) -> dict[str, torch.Tensor]:
    """Tensors of a `.safetensors`, `.pt`, `.pth` or `.bin` file, refusing pickled code, or of a TorchScript archive
    (its weights only: OpenAI's extras and buffers that are not weights are dropped)."""
    file = Path(file)
    try:
        with _reading(file):
            if is_torchscript(file):
                with warnings.catch_warnings():  # torch.jit is deprecated, and OpenAI's archives are still TorchScript
                    warnings.simplefilter("ignore", FutureWarning)
                    state = torch.jit.load(str(file), map_location="cpu").state_dict()
                return {k: v for k, v in state.items() if k not in OPENAI_EXTRAS and k.rsplit(".", 1)[-1] not in _BUFFERS_NOT_WEIGHTS}
            return open_clip_load_state_dict(str(file), weights_only=True)
    except RuntimeError as e:
        raise DataError(f"{file}: not a readable weights file (RuntimeError: {e})") from None


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


def load_weights(model: torch.nn.Module, file: str | Path) -> None:
    """Load an open_clip state dict strictly, reading the file once; a mismatch names every
    missing, unexpected and wrongly shaped key, and a weight holding NaN or inf is refused."""
    file = Path(file)
    try:
        if is_torchscript(file):
            model.load_state_dict(read_state_dict(file), strict=True)
        else:
            with _reading(file):
                open_clip.load_checkpoint(model, str(file), strict=True, weights_only=True)
        bad = first_nonfinite(model.state_dict())
        if bad is not None:
            raise NonFiniteError(f"{file}: weight {bad} holds NaN or inf: refused (a model with it scores nothing)")
    except (RuntimeError, AttributeError, KeyError, ValueError) as e:  # open_clip's loader fails in several ways on foreign weights
        state, expected = read_state_dict(file), model.state_dict()  # only on failure: say why
        missing, unexpected = sorted(expected.keys() - state.keys()), sorted(state.keys() - expected.keys())
        mismatched = [(k, tuple(state[k].shape), tuple(expected[k].shape)) for k in sorted(expected.keys() & state.keys())
                      if state[k].shape != expected[k].shape]
        if missing or unexpected or mismatched:
            raise CheckpointMismatchError(file, missing=missing, unexpected=unexpected, mismatched=mismatched) from None
        raise DataError(f"{file}: not a readable weights file ({type(e).__name__}: {e})") from None


def weights_sha256(model: str | Path, pretrained: str | None = None) -> str | None:
    """The SHA-256 of the weights file behind a model name (a checkpoint folder's, or a `pretrained` file), which
    names these exact weights in results and model cards; None for open_clip tags and hub ids."""
    file = Path(model) / WEIGHTS_NAME if (Path(model) / WEIGHTS_NAME).is_file() else Path(pretrained) if pretrained else None
    if file is None or not file.is_file():
        return None
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


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
