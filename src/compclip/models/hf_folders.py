"""Models transformers loads and compclip scores without open_clip: a local folder of `save_pretrained` (its
`config.json` naming one of `CLASSES`, no `open_clip_config.json`) or `hf:ORG/NAME` from the Hugging Face cache.

Which class a folder holds is read from its `config.json` alone (`architectures`, else `model_type`), so an unknown
model or one asking to run its own Python (`auto_map`, transformers' `trust_remote_code`) is refused in one line
before any weight is read. The scorers of these classes live in `compclip.transformers_scoring`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DataError, DownloadError, UsageError
from ..extras import need
from ..io import sha256_of
from .checkpoint import CONFIG_NAME, DIGEST_ATTR, OPEN_CLIP_CONFIG_NAME, WEIGHTS_NAME

PREFIX = "hf:"
# transformers' class: its model_type. BLIP's model_type is shared by its captioning and question-answering heads, whose
# retrieval heads would load random: BLIP is recognised by its `architectures` alone.
CLASSES = {"CLIPModel": "clip", "SiglipModel": "siglip", "Siglip2Model": "siglip2", "BlipForImageTextRetrieval": "blip",
           "FlavaModel": "flava"}
BY_TYPE = {"clip": "CLIPModel", "siglip": "SiglipModel", "siglip2": "Siglip2Model", "flava": "FlavaModel"}
# A class a release names whose weights hold one of CLASSES whole: FLAVA's release (facebook/flava-full) names its
# pretraining class, whose `flava` is the FlavaModel its contrastive head scores with (transformers loads it from those
# weights, leaving the pretraining heads out).
HOLDS = {"FlavaForPreTraining": "FlavaModel"}


@dataclass(frozen=True)
class TransformersModel:
    """A model transformers loads: `name` as the user gave it, `where` the folder or hub id `from_pretrained` takes, and
    its class's name."""

    name: str
    where: str
    cls: str

    @property
    def kind(self) -> str:
        return CLASSES[self.cls]


def is_transformers_folder(folder: Path) -> bool:
    """A folder transformers saved: a config.json with a `model_type`, and no open_clip config beside it (a compclip
    checkpoint or open_clip export, which open_clip loads)."""
    if not (folder / CONFIG_NAME).is_file() or (folder / OPEN_CLIP_CONFIG_NAME).is_file():
        return False
    try:
        return "model_type" in json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return False


def transformers_model(name: str) -> TransformersModel | None:
    """The transformers model `name` means (`hf:ORG/NAME`, or a transformers folder), its class checked; None for any
    other name (open_clip's)."""
    if name.startswith(PREFIX):
        repo = name.removeprefix(PREFIX)
        return TransformersModel(name, repo, model_class(name, _hub_config(name, repo)))
    folder = Path(name)
    if ":" in name or not folder.is_dir() or not is_transformers_folder(folder):
        return None
    return TransformersModel(name, str(folder), model_class(str(folder / CONFIG_NAME), folder / CONFIG_NAME))


def _hub_config(name: str, repo: str) -> Path:
    """The repository's config.json through the Hugging Face cache (offline under HF_HUB_OFFLINE)."""
    from huggingface_hub import constants, hf_hub_download

    if repo.count("/") != 1 or not all(repo.split("/")):
        raise UsageError(f"--model {name}: expected hf:ORG/NAME, a Hugging Face repository")
    try:
        return Path(hf_hub_download(repo, CONFIG_NAME))
    except Exception as e:
        said = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        where = (f"offline (HF_HUB_OFFLINE), and the Hugging Face cache {constants.HF_HUB_CACHE} does not hold it"
                 if constants.HF_HUB_OFFLINE else said)
        raise DownloadError(f"{name}: its {CONFIG_NAME} could not be had: {where}") from None


def model_class(name: str, config_file: Path) -> str:
    """The transformers class `config_file` names, of those compclip scores; one line for any other, or for a config
    that asks for the repository's own Python."""
    try:
        config: dict[str, Any] = json.loads(config_file.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        raise DataError(f"{config_file}: unreadable JSON ({type(e).__name__}: {e})") from None
    if config.get("auto_map"):
        raise DataError(f"{name}: its config.json maps the model to the repository's own Python (auto_map, transformers' "
                        "trust_remote_code); compclip never runs code a downloaded or given file asks for")
    named = [HOLDS.get(c, c) for c in config.get("architectures") or [] if c in CLASSES or c in HOLDS]
    cls = named[0] if named else None if config.get("architectures") else BY_TYPE.get(config.get("model_type"))
    if cls is None:
        known = ", ".join(f"{c} ({t})" for c, t in CLASSES.items())
        raise UsageError(f"{name}: model_type {config.get('model_type')!r} (architectures {config.get('architectures')}) is not "
                         f"one compclip scores; it scores {known}")
    return cls


def load_transformers(model: TransformersModel, device: str = "cpu") -> tuple[Any, Any]:
    """(the model in eval mode on `device`, its processor), each as transformers' `from_pretrained` loads them, never
    with remote code; the model carries the SHA-256 of a local folder's weights file (what results name it by)."""
    need("transformers", f"{model.name} (a transformers model)")
    import transformers
    from transformers import AutoProcessor

    try:
        net = getattr(transformers, model.cls).from_pretrained(model.where, trust_remote_code=False)
        processor = AutoProcessor.from_pretrained(model.where, trust_remote_code=False)
    except OSError as e:
        said = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DownloadError(f"{model.name}: transformers could not load it ({said})") from None
    weights = Path(model.where) / WEIGHTS_NAME
    if weights.is_file():
        setattr(net, DIGEST_ATTR, sha256_of(weights))
    return net.to(device).eval(), processor
