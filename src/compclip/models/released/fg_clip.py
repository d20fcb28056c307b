"""FG-CLIP's Hub repository as a folder of transformers' plain `CLIPModel`, converted once into the Hugging Face cache,
so that compclip's transformers scorer loads it without the repository's own Python (its config's `auto_map`).

What FG-CLIP is on a short caption, read from the released code (360CVGroup/FG-CLIP@0fcea590, branch v1.0,
fgclip/model/clip_strc/fgclip.py and modeling_clip.py):

- `FGCLIPModel` subclasses the repository's copy of transformers' `CLIPModel`: `text_model` (`CLIPTextTransformer`),
  `vision_model` (`CLIPVisionTransformer`), `visual_projection`, `text_projection` and `logit_scale`, named as
  `CLIPModel` names them. Beside them it keeps `text_filip_projection` (the long captions' projection),
  `logit_scale_finegraind` and `logit_scale_hardneg` (its training losses'), and in the text embeddings
  `position_embedding_res` and `position_embedding_ori` (248 positions, for long captions).
- `get_text_features(walk_short_pos=True)`, its default and what it uses for captions of up to 77 tokens, adds
  `position_embedding` (77 positions) to the token embeddings and projects with `text_projection`: `CLIPModel`'s own
  computation. `get_image_features` is the vision tower's pooled output through `visual_projection`, as `CLIPModel`'s.

So the long-caption and training weights are dropped and the rest loaded by `CLIPModel` as they are. The converted
folder holds the repository's config with `CLIPModel` named and no `auto_map`, the weights less `DROPPED` (checked
against `CLIPModel`'s keys and shapes: a key of no `CLIPModel` weight, one lacking or of another shape is one line
naming it), and the tokenizer's and image processor's files as the repository serves them. It records the size and SHA-256
of the weights it was made from, and is made again when the repository's weights are not those.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from ...errors import DataError
from ...io import atomic_dir
from ..checkpoint import CONFIG_NAME, WEIGHTS_NAME, read_state_dict

# FG-CLIP's weights that plain CLIP on a short caption never reads
DROPPED = ("text_filip_projection.weight", "logit_scale_finegraind", "logit_scale_hardneg",
           "text_model.embeddings.position_embedding_res.weight", "text_model.embeddings.position_embedding_ori.weight")
SOURCE_WEIGHTS = (WEIGHTS_NAME, "pytorch_model.bin")  # what the repository may serve its weights as, the first found read


def source_weights(name: str, snapshot: Path) -> Path:
    """The weights file of FG-CLIP's repository snapshot, the first of `SOURCE_WEIGHTS` it serves."""
    weights = next((snapshot / f for f in SOURCE_WEIGHTS if (snapshot / f).is_file()), None)
    if weights is None:
        raise DataError(f"{name}: {snapshot} holds none of {', '.join(SOURCE_WEIGHTS)}, the weights FG-CLIP's repository serves")
    return weights


def make_clip_folder(snapshot: Path, weights: Path, out: Path, metadata: dict[str, str]) -> None:
    """`out`, written whole or not at all: a `CLIPModel` folder of FG-CLIP's repository snapshot and its `weights`, the
    converted weights recording `metadata` (what they were made from)."""
    from safetensors.torch import save_file

    config = _clip_config(snapshot / CONFIG_NAME)
    state = _clip_weights(read_state_dict(weights), config, weights)
    with atomic_dir(out) as tmp:
        for file in snapshot.iterdir():  # the tokenizer's and image processor's files
            if file.is_file() and file.name != CONFIG_NAME and file.name not in SOURCE_WEIGHTS and not file.name.startswith("model."):
                shutil.copyfile(file, tmp / file.name)
        (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=2), encoding="utf-8")
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp / WEIGHTS_NAME), metadata=metadata)


def _clip_config(file: Path) -> dict:
    """FG-CLIP's config as `CLIPModel`'s: the class named, the `auto_map` to the repository's Python dropped."""
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise DataError(f"{file}: not FG-CLIP's config ({type(e).__name__}: {e})") from None
    if not isinstance(config, dict) or config.get("model_type") != "clip":
        raise DataError(f"{file}: model_type {config.get('model_type') if isinstance(config, dict) else None!r}, not the "
                        "'clip' FG-CLIP's config names: not FG-CLIP's repository")
    config.pop("auto_map", None)
    return {**config, "architectures": ["CLIPModel"]}


def _clip_weights(state: dict, config: dict, file: Path) -> dict:
    """FG-CLIP's weights less `DROPPED`, each one a `CLIPModel` of `config` has, in its shape."""
    import torch
    from transformers import CLIPConfig, CLIPModel

    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in CLIPModel(CLIPConfig(**config)).state_dict().items()}
    kept = {k: v for k, v in state.items() if k not in DROPPED}
    unexpected, missing = sorted(kept.keys() - expected.keys()), sorted(expected.keys() - kept.keys())
    mismatched = [k for k in sorted(expected.keys() & kept.keys()) if tuple(kept[k].shape) != expected[k]]
    if unexpected:
        raise DataError(f"{file}: {unexpected[0]} is no weight of transformers' CLIPModel nor one FG-CLIP keeps for long captions"
                        f"{_more(unexpected)}: not FG-CLIP's CLIP weights")
    if missing:
        raise DataError(f"{file}: lacks {missing[0]}, a weight of transformers' CLIPModel{_more(missing)}")
    if mismatched:
        key = mismatched[0]
        raise DataError(f"{file}: {key} has shape {tuple(kept[key].shape)}, but the CLIPModel of its config.json has {expected[key]}"
                        f"{_more(mismatched)}")
    return kept


def _more(keys: list[str]) -> str:
    return f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
