"""Models transformers loads and compclip scores without open_clip: a local folder of `save_pretrained` (its
`config.json` naming one of `CLASSES`, no `open_clip_config.json`) or `hf:ORG/NAME` from the Hugging Face cache.

Which class a folder holds is read from its `config.json` alone (`architectures`, else `model_type`), and the folder is
checked before any weight is loaded (`check_folder`): an unknown model, one asking to run its own Python (`auto_map`, in
any of the configs transformers reads), a folder without its tokenizer's files, or weights of another class than the
config's is refused in one line naming the folder and the file. The scorers of these classes live in
`compclip.transformers_scoring`.
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
# The configs transformers reads a model, its processor and its tokenizer from: any may map a class to the folder's own
# Python (`auto_map`), which transformers refuses with a traceback and compclip never runs.
CONFIGS = (CONFIG_NAME, "processor_config.json", "preprocessor_config.json", "tokenizer_config.json")
# The files a tokenizer is read from, any one set: a fast tokenizer's, WordPiece's vocabulary (BLIP's, FLAVA's), BPE's
# vocabulary and merges (CLIP's), SentencePiece's model (SigLIP's, SigLIP 2's). Without them transformers still makes a
# tokenizer, of its special tokens alone: every word <unk>, every caption the same, every item a tie.
TOKENIZER_FILES = (("tokenizer.json",), ("vocab.txt",), ("vocab.json", "merges.txt"), ("spiece.model",), ("tokenizer.model",),
                   ("sentencepiece.bpe.model",))
# what a Hub repository's check reads (and `from_pretrained` would fetch anyway): its configs, tokenizer and weights
HUB_FILES = ["*.json", "*.txt", "*.model", "model*.safetensors"]


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
        config = _hub_config(name, repo)
        cls = model_class(name, config)
        check_folder(name, hub_snapshot(name, repo), cls)
        return TransformersModel(name, repo, cls)
    folder = Path(name)
    if ":" in name or not folder.is_dir() or not is_transformers_folder(folder):
        return None
    cls = model_class(str(folder / CONFIG_NAME), folder / CONFIG_NAME)
    check_folder(name, folder, cls)
    return TransformersModel(name, str(folder), cls)


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


def hub_snapshot(name: str, repo: str) -> Path:
    """The repository's snapshot folder in the Hugging Face cache, holding the files `HUB_FILES` names (fetched unless
    HF_HUB_OFFLINE), what `check_folder` reads."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo, allow_patterns=HUB_FILES))
    except Exception as e:
        said = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DownloadError(f"{name}: its configs and tokenizer could not be had: {said}") from None


def check_folder(name: str, folder: Path, cls: str) -> None:
    """Refuse, in one line naming the folder and the file, what transformers would load with a traceback or score
    wrongly without one: a config asking for the folder's own Python, no tokenizer files, weights of another class than
    the config names (transformers loads what fits and draws the rest at random, or stops at the first other shape)."""
    for config in CONFIGS:
        if _maps_to_code(_json(folder / config)):
            raise DataError(f"{name}: {folder / config} maps a class to the repository's own Python (auto_map, transformers' "
                            "trust_remote_code); compclip never runs code a downloaded or given file asks for")
    if not any(all((folder / f).is_file() for f in files) for files in TOKENIZER_FILES):
        known = ", ".join(" and ".join(files) for files in TOKENIZER_FILES)
        raise DataError(f"{name}: {folder} holds none of its tokenizer's files ({known}); transformers would make a tokenizer "
                        "that knows no word, scoring every caption alike: copy them from the model's release beside config.json")
    held = weights_class(folder)
    if held is not None and held[0] != cls:
        raise DataError(f"{name}: {held[1]} holds the weights of a {held[0]}, but {folder / CONFIG_NAME} names a {cls}: refused "
                        "(transformers would load what fits and leave the rest random): the config and weights of one model")


def _json(file: Path) -> Any:
    """A config's JSON, None where the folder has no such file; an unreadable one is one line naming it."""
    if not file.is_file():
        return None
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        raise DataError(f"{file}: unreadable JSON ({type(e).__name__}: {e})") from None


def _maps_to_code(config: Any) -> bool:
    """Whether a config holds an `auto_map` anywhere (a processor's config nests its tokenizer's and image processor's)."""
    if isinstance(config, dict):
        return bool(config.get("auto_map")) or any(_maps_to_code(v) for v in config.values())
    return isinstance(config, list) and any(_maps_to_code(v) for v in config)


def weights_class(folder: Path) -> tuple[str, Path] | None:
    """The class of `CLASSES` whose weights the folder's weights file holds, told by the keys only it has (FLAVA's
    multimodal encoder, BLIP's ITM head, SigLIP's logit bias, CLIP's visual projection; SigLIP 2's patches embedded by a
    linear layer, SigLIP's by a convolution), with the file; None where no file is read or no class is told."""
    shapes, file = _weight_shapes(folder)
    if file is None:
        return None
    keys = {k.removeprefix("flava.") for k in shapes}  # FlavaForPreTraining keeps the FlavaModel it scores under `flava`
    if any(k.startswith("multimodal_model.") for k in keys):
        return "FlavaModel", file
    if "itm_head.weight" in keys:
        return "BlipForImageTextRetrieval", file
    if "logit_bias" in keys:
        patches = shapes.get("vision_model.embeddings.patch_embedding.weight")
        return ("Siglip2Model" if patches is not None and len(patches) == 2 else "SiglipModel"), file
    if "visual_projection.weight" in keys:
        return "CLIPModel", file
    return None


def _weight_shapes(folder: Path) -> tuple[dict[str, tuple[int, ...]], Path | None]:
    """Each weight's shape, from the headers of the folder's safetensors files (one, or the shards its index names),
    else from `pytorch_model.bin` (read as tensors only); ({}, None) where none is there or readable: transformers says why."""
    import pickle

    from safetensors import SafetensorError, safe_open

    index = folder / "model.safetensors.index.json"
    files = [folder / WEIGHTS_NAME] if (folder / WEIGHTS_NAME).is_file() else []
    if not files and index.is_file():
        files = [folder / shard for shard in sorted(set((_json(index) or {}).get("weight_map", {}).values()))]
    try:
        if files:
            shapes: dict[str, tuple[int, ...]] = {}
            for file in files:
                with safe_open(str(file), framework="pt") as weights:
                    shapes.update((k, tuple(weights.get_slice(k).get_shape())) for k in weights.keys())  # noqa: SIM118 (no __iter__)
            return shapes, files[0] if len(files) == 1 else index
        if (folder / "pytorch_model.bin").is_file():
            import torch

            state = torch.load(str(folder / "pytorch_model.bin"), map_location="cpu", weights_only=True, mmap=True)
            return {k: tuple(v.shape) for k, v in state.items()}, folder / "pytorch_model.bin"
    except (SafetensorError, OSError, RuntimeError, EOFError, pickle.UnpicklingError, AttributeError):  # transformers says why
        return {}, None
    return {}, None


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
