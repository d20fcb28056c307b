"""A LoRA checkpoint of DAC's and SVLC's open_clip fork merged into plain open_clip weights, once, when the hand-downloaded
file is converted (`_state_dict_file`): W ← W + (B A)·alpha/r for every LoRA layer, the halves dropped, so open_clip's
own loader reads the result and no LoRA code runs at scoring time.

What the merge does is read from the released code (SivanDoveh/DAC@ca23611c, SivanDoveh/TSVLC@90b18e7f: the same
`loralib` and, but for DAC's `kqv_lora` flag, the same `model.py`):

- Which layers: `model.py`'s `ResidualAttentionBlock.__init__` builds, for `lora > 0`, `lora_layers.MultiheadAttention
  (d_model, n_head, r=lora)` and the MLP's `c_fc`, `c_proj` as `lora_layers.Linear(..., r=lora)` (DAC's `kqv_lora` keeps
  the MLP plain); `VisualTransformer.__init__` the patch embedding `conv1` as `lora_layers.Conv2d(..., r=lora)`;
  `CLIP.__init__` gives both towers the same `lora` (the image tower none under `--freeze_img`). Embeddings, layer norms,
  `proj` and `text_projection` stay plain. The READMEs' commands train with `--lora 4 --pretrained openai`, neither
  `--kqv_lora` nor `--freeze_img`, and evaluate a checkpoint with the same flags: so 97 layers of ViT-B/32, each rank 4.
- The halves and their scaling: `loralib/layers.py`'s `Linear` keeps `lora_A` (r, in) and `lora_B` (out, r) beside its
  `weight` and computes x Wᵀ + b + (x Aᵀ Bᵀ)·scaling; `Conv2d` keeps `lora_A` (r·k, in·k), `lora_B` (out·k, r·k) and
  convolves with W + (B A).view(W.shape)·scaling; `MultiheadAttention` keeps `in_proj_weight_lora_A` (r, E) and
  `in_proj_weight_lora_B` (3E, r) beside `in_proj_weight` (`multi_head_attention_forward`'s self-attention branch adds
  linear(linear(x, A), B)·scaling to the packed q, k, v) and its `out_proj` is a LoRA `Linear`. Every one has
  scaling = lora_alpha / r with `lora_alpha` left at its default, 1.
- Never merged in the file: the layers' own `eval()` would merge (`merge_weights`), but `nn.Module.eval()` calls
  `train(False)`, whose LoRA override only un-merges, so a saved `weight` never holds its LoRA (building the fork's
  model, `build_model_from_openai_state_dict(..., lora=4)`, leaves every layer's `merged` False): adding once is right.
- How it is saved: `training/main.py` saves `{"epoch", "name", "state_dict": model.state_dict(), "optimizer"}`, a
  distributed run's keys prefixed `module.`; it and `aro_clip_lora_eval.py` resume with `checkpoint["state_dict"]`,
  `module.` stripped, `model.load_state_dict(sd)` strict.
- The other keys are open_clip's own names: the fork's `CLIP`, `VisualTransformer` and `ResidualAttentionBlock` with
  `nn.MultiheadAttention` keep open_clip's module names (the fork's model built with `lora=4` has, besides its 194 LoRA
  halves, exactly the keys and shapes of open_clip 3.3's ViT-B-32-quickgelu).

A key the merge cannot place, a half without the other, a half of another rank, a weight the architecture lacks or
has in another shape is one `DataError` naming the file and the key.
"""
from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path

import open_clip
import torch

from ...errors import DataError


def halves(weight: str) -> tuple[str, str]:
    """The keys of a weight's LoRA halves A and B: loralib's `Linear` and `Conv2d` keep them beside the module's weight
    (`m.weight` → `m.lora_A`), the fork's `MultiheadAttention` beside its packed projection (`m.in_proj_weight_lora_A`)."""
    stem = weight.removesuffix("weight") if weight.endswith(".weight") else weight + "_"
    return stem + "lora_A", stem + "lora_B"


def _architecture(model: str) -> dict[str, torch.Size]:
    """The names and shapes of open_clip's `model`, built on the meta device (no memory, no initialisation)."""
    with torch.device("meta"):
        return {k: v.shape for k, v in open_clip.CLIP(**open_clip.get_model_config(model)).state_dict().items()}


def _unwrapped(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The keys without the `module.` a distributed run's wrapper prefixes, stripped as the release's resume strips it."""
    if state and next(iter(state)).startswith("module."):
        return {k.removeprefix("module."): v for k, v in state.items()}
    return state


def _shape(t) -> str:
    return "(" + ", ".join(map(str, t)) + ")"


def merge(state: dict[str, torch.Tensor], lora: dict, model: str, file: Path) -> dict[str, torch.Tensor]:
    """The state dict of open_clip's `model` from the release's one: each weight matching `lora["layers"]` plus its
    rank-`lora["rank"]` LoRA times `lora["alpha"]` / rank (the product in float64, added in the weight's dtype), the LoRA
    halves dropped."""
    state = _unwrapped(state)
    shapes = _architecture(model)
    layers = sorted(w for w in shapes if any(fnmatchcase(w, p) for p in lora["layers"]))
    _check_halves(state, shapes, layers, lora, model, file)
    plain = {k: v for k, v in state.items() if "lora_" not in k}
    _check_plain(plain, shapes, model, file)
    scaling = lora["alpha"] / lora["rank"]
    for weight in layers:
        a, b = halves(weight)
        w = plain[weight]
        plain[weight] = w + ((state[b].double() @ state[a].double()) * scaling).reshape(w.shape).to(w.dtype)
    return plain


def _check_halves(state: dict[str, torch.Tensor], shapes: dict[str, torch.Size], layers: list[str], lora: dict, model: str,
                  file: Path) -> None:
    """Every LoRA key of the file (loralib's own test: `"lora_" in k`, `lora_state_dict`) is a half of a layer the
    release trains, beside its other half, of the rank the release trains; and every such layer has its halves."""
    rank = lora["rank"]
    half_of = {h: w for w in layers for h in halves(w)}
    for key in (k for k in state if "lora_" in k):
        if key not in half_of:
            raise DataError(f"{file}: {key} is a LoRA half the merge cannot place: no layer of {model} the release trains "
                            f"LoRA in ({', '.join(lora['layers'])}) has it")
        weight = half_of[key]
        a, b = halves(weight)
        if a not in state or b not in state:
            there, missing = (a, b) if a in state else (b, a)
            raise DataError(f"{file}: {there} is there but {missing} is not, the other half of {weight}'s LoRA")
        out_dim, in_dim, *kernel = shapes[weight]
        k = kernel[-1] if kernel else 1  # loralib's Conv2d: A (r·k, in·k), B (out·k, r·k)
        want = (rank * k, in_dim * k) if key == a else (out_dim * k, rank * k)
        if tuple(state[key].shape) != want:
            raise DataError(f"{file}: {key} has shape {_shape(state[key].shape)}, but a rank-{rank} LoRA of {weight} "
                            f"{_shape(shapes[weight])} has {_shape(want)}")
    for weight in layers:
        a, b = halves(weight)
        if a not in state:
            raise DataError(f"{file}: lacks {a} and {b}, the LoRA of {weight} that the release trains")


def _check_plain(plain: dict[str, torch.Tensor], shapes: dict[str, torch.Size], model: str, file: Path) -> None:
    """The other keys are open_clip's `model`'s, each in its shape, none lacking: what open_clip's strict load would
    refuse in a message of many lines, said in one."""
    for key, value in plain.items():
        if key not in shapes:
            raise DataError(f"{file}: {key} is no weight of open_clip's {model}: the merge cannot place it")
        if value.shape != shapes[key]:
            raise DataError(f"{file}: {key} has shape {_shape(value.shape)}, but open_clip's {model} has {_shape(shapes[key])}")
    lacking = [k for k in shapes if k not in plain]
    if lacking:
        raise DataError(f"{file}: lacks {lacking[0]}, a weight of open_clip's {model}" +
                        (f" (and {len(lacking) - 1} more)" if len(lacking) > 1 else ""))
