"""compclip checkpoint folders, safe weight loading, and export to plain open_clip files.

A checkpoint is a folder: `model.safetensors` (the open_clip state dict), `config.json`
(everything needed to rebuild the model plus how it was trained) and `open_clip_config.json`
(so `open_clip.create_model_and_transforms('local-dir:FOLDER')` loads it too).
Nothing here ever unpickles code: safetensors, or `torch.load(weights_only=True)`.
"""
from __future__ import annotations

import json
import os
import pickle
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import open_clip
import torch
from open_clip.factory import load_state_dict as open_clip_load_state_dict
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .. import __version__
from ..errors import DataError, MissingFileError, NonFiniteError, UsageError
from ..io import atomic_dir, atomic_path, write_json

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
FORCEABLE = {"quick_gelu", "text_cfg.context_length", "vision_cfg.image_size"}


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


def read_state_dict(file: str | Path) -> dict[str, torch.Tensor]:
    """Tensors of a `.safetensors`, `.pt`, `.pth` or `.bin` file, refusing pickled code."""
    file = Path(file)
    try:
        with _reading(file):
            return open_clip_load_state_dict(str(file), weights_only=True)
    except RuntimeError as e:
        raise DataError(f"{file}: not a readable weights file (RuntimeError: {e})") from None


def load_weights(model: torch.nn.Module, file: str | Path) -> None:
    """Load an open_clip state dict strictly, reading the file once; a mismatch names every
    missing, unexpected and wrongly shaped key, and a weight holding NaN or inf is refused."""
    file = Path(file)
    try:
        with _reading(file):
            open_clip.load_checkpoint(model, str(file), strict=True, weights_only=True)
        bad = first_nonfinite(model.state_dict())
        if bad is not None:
            raise NonFiniteError(f"{file}: weight {bad} holds NaN or inf: refused (a model with it scores nothing)")
    except RuntimeError as e:
        if "Error(s) in loading state_dict" not in str(e):
            raise DataError(f"{file}: not a readable weights file (RuntimeError: {e})") from None
        state, expected = read_state_dict(file), model.state_dict()  # only on failure: say why
        raise CheckpointMismatchError(
            file,
            missing=sorted(expected.keys() - state.keys()),
            unexpected=sorted(state.keys() - expected.keys()),
            mismatched=[
                (k, tuple(state[k].shape), tuple(expected[k].shape))
                for k in sorted(expected.keys() & state.keys())
                if state[k].shape != expected[k].shape
            ],
        ) from None


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


def export_target(checkpoint: str | Path, out: str | Path, force: bool = False) -> Path:
    """Where an export goes: `out`, or inside it when it is a folder (or ends with a slash); an existing file only with `force`."""
    target = Path(out)
    if target.is_dir() or str(out).endswith(("/", os.sep)):
        target = target / f"{Path(checkpoint).resolve().name}.safetensors"
    if target.is_dir():
        raise UsageError(f"{target} is a folder: name the .safetensors file to write")
    if target.exists() and not force:
        raise UsageError(f"{target} exists: pass --force to overwrite it")
    return target


def export_open_clip(checkpoint: str | Path, out: str | Path) -> str:
    """Write a plain open_clip state dict to the file `out`; returns the Python that loads it with open_clip alone."""
    from .bundled import BUNDLED_MODELS

    config = check_checkpoint_folder(Path(checkpoint))
    tensors = load_file(Path(checkpoint) / WEIGHTS_NAME)
    bad = first_nonfinite(tensors)
    if bad is not None:
        raise NonFiniteError(f"{Path(checkpoint) / WEIGHTS_NAME}: weight {bad} holds NaN or inf: not exported")
    name = config["model_name"]
    with atomic_path(out) as tmp:
        save_file(tensors, tmp, metadata={"format": "pt", "open_clip_model": name})
    builtin = open_clip.get_model_config(name) if ":" not in name else None
    tokenizer = _tokenizer_line(config["tokenizer"])
    if config.get("method_weights"):
        tokenizer += (f"\n# note: the modules the {config.get('method')} method trained ({config['method_weights']}) are not part "
                      "of this export; compclip.eval.load_scorer(CHECKPOINT) evaluates with them")
    if builtin is None:
        return f"model, _, preprocess = open_clip.create_model_and_transforms('local-dir:{Path(checkpoint)}')\n{tokenizer}"
    forces = []
    cfg = config["model_cfg"]
    if cfg.get("quick_gelu", False) != builtin.get("quick_gelu", False):
        forces.append("force_quick_gelu=True")
    if cfg["text_cfg"].get("context_length") != builtin["text_cfg"].get("context_length"):
        forces.append(f"force_context_length={cfg['text_cfg']['context_length']}")
    if cfg["vision_cfg"].get("image_size") != builtin["vision_cfg"].get("image_size"):
        forces.append(f"force_image_size={cfg['vision_cfg']['image_size']!r}")
    args = ", ".join([repr(name), f"pretrained={str(out)!r}", *forces])
    call = f"model, _, preprocess = open_clip.create_model_and_transforms({args})\n{tokenizer}"
    return f"import compclip.models  # registers {name}\n{call}" if name in BUNDLED_MODELS else call


def _tokenizer_line(spec: dict[str, Any]) -> str:
    """The open_clip call that builds the checkpoint's tokenizer. The CLIP BPE one is named directly:
    `open_clip.get_tokenizer` picks SigLIP's hub tokenizer for any name containing "siglip"."""
    from .bundled import HF_TOKENIZED, wordpiece_folder

    if spec["source"] == "clip_bpe":
        return f"tokenizer = open_clip.SimpleTokenizer(context_length={spec['context_length']})"
    if spec["source"] in HF_TOKENIZED:
        return (f"tokenizer = open_clip.tokenizer.HFTokenizer({str(wordpiece_folder())!r}, context_length={spec['context_length']}, "
                f"clean={HF_TOKENIZED[spec['source']]!r})")
    return f"tokenizer = open_clip.get_tokenizer({spec['source']!r}, context_length={spec['context_length']})"
