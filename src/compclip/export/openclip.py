"""open_clip exports: one `.safetensors` state dict, or a `local-dir:` folder (`open_clip_config.json`,
`open_clip_model.safetensors`, tokenizer files where open_clip's tokenizer is a Hugging Face one), the layout
open_clip reads from a folder and from the Hugging Face hub."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import open_clip
from safetensors.torch import load_file, save_file

from ..errors import NonFiniteError
from ..io import atomic_path, write_json
from ..models.bundled import BUNDLED_MODELS, HF_TOKENIZED, wordpiece_folder
from ..models.checkpoint import OPEN_CLIP_CONFIG_NAME, WEIGHTS_NAME, check_checkpoint_folder, first_nonfinite

FOLDER_WEIGHTS_NAME = "open_clip_model.safetensors"  # the name open_clip looks for first in a folder or hub repo


def _weights(checkpoint: Path) -> dict:
    tensors = load_file(checkpoint / WEIGHTS_NAME)
    bad = first_nonfinite(tensors)
    if bad is not None:
        raise NonFiniteError(f"{checkpoint / WEIGHTS_NAME}: weight {bad} holds NaN or inf: not exported")
    return tensors


def _imports(name: str) -> str:
    """The snippet's first lines: open_clip, and where the architecture is one compclip bundles, the module that registers
    it with open_clip and its image trunk with timm (`compclip.models` itself loads its names on first use)."""
    return "import open_clip\n" + (f"import compclip.models.bundled  # registers {name}\n" if name in BUNDLED_MODELS else "")


def export_open_clip(checkpoint: str | Path, out: str | Path) -> str:
    """Write a plain open_clip state dict to the file `out`; returns the Python that loads it with open_clip alone."""
    checkpoint = Path(checkpoint)
    config = check_checkpoint_folder(checkpoint)
    tensors = _weights(checkpoint)
    name = config["model_name"]
    with atomic_path(out) as tmp:
        save_file(tensors, tmp, metadata={"format": "pt", "open_clip_model": name})
    builtin = open_clip.get_model_config(name) if ":" not in name else None
    tokenizer = _tokenizer_line(config["tokenizer"]) + "".join(f"\n# note: {n}" for n in method_notes(config))
    if builtin is None:
        return f"import open_clip\nmodel, _, preprocess = open_clip.create_model_and_transforms({f'local-dir:{checkpoint}'!r})\n{tokenizer}"
    forces = []
    cfg = config["model_cfg"]
    if cfg.get("quick_gelu", False) != builtin.get("quick_gelu", False):
        forces.append("force_quick_gelu=True")
    if cfg["text_cfg"].get("context_length") != builtin["text_cfg"].get("context_length"):
        forces.append(f"force_context_length={cfg['text_cfg']['context_length']}")
    if cfg["vision_cfg"].get("image_size") != builtin["vision_cfg"].get("image_size"):
        forces.append(f"force_image_size={cfg['vision_cfg']['image_size']!r}")
    args = ", ".join([repr(name), f"pretrained={str(out)!r}", *forces])
    return f"{_imports(name)}model, _, preprocess = open_clip.create_model_and_transforms({args})\n{tokenizer}"


def write_open_clip_folder(checkpoint: Path, folder: Path, tokenizer: Any) -> list[str]:
    """Fill `folder` so that `open_clip.create_model_and_transforms('local-dir:FOLDER')` and
    `open_clip.get_tokenizer('local-dir:FOLDER')` load the checkpoint (`folder_usage`); returns the notes."""
    config = check_checkpoint_folder(checkpoint)
    name = config["model_name"]
    save_file(_weights(checkpoint), folder / FOLDER_WEIGHTS_NAME, metadata={"format": "pt", "open_clip_model": name})
    written = copy.deepcopy(json.loads((checkpoint / OPEN_CLIP_CONFIG_NAME).read_text(encoding="utf-8")))
    notes, source = [], config["tokenizer"]["source"]
    if source in HF_TOKENIZED:  # open_clip reads a local-dir's tokenizer files when its config names a HF tokenizer
        written["model_cfg"]["text_cfg"].update(hf_tokenizer_name=str(wordpiece_folder()), tokenizer_kwargs={"clean": HF_TOKENIZED[source]})
    if written["model_cfg"]["text_cfg"].get("hf_tokenizer_name"):
        try:
            tokenizer._build().save_pretrained(str(folder))
        except Exception as e:  # a hub tokenizer offline: the model is still worth writing
            notes.append(f"tokenizer: not written ({type(e).__name__}: {e}); open_clip fetches "
                         f"{written['model_cfg']['text_cfg']['hf_tokenizer_name']} from the hub instead")
    write_json(folder / OPEN_CLIP_CONFIG_NAME, written)
    return notes


def folder_usage(name: str, shown: str | Path) -> str:
    """The Python that loads an open_clip folder export of model `name` from `shown`, the path a string literal of it
    (`repr`): a space, a quote or a newline in a folder's name would otherwise break the lines a user pastes."""
    where = f"local-dir:{shown}"
    return (f"{_imports(name)}model, _, preprocess = open_clip.create_model_and_transforms({where!r})\n"
            f"tokenizer = open_clip.get_tokenizer({where!r})")


def method_notes(config: dict[str, Any]) -> list[str]:
    """What an export leaves out: the modules a method owns (OC-CLIP's binding module) are not open_clip's."""
    if not config.get("method_weights"):
        return []
    return [f"the modules the {config.get('method')} method trained ({config['method_weights']}) are not part of this export; "
            "compclip.eval.load_scorer(CHECKPOINT) evaluates with them"]


def _tokenizer_line(spec: dict[str, Any]) -> str:
    """The open_clip call that builds the checkpoint's tokenizer. The CLIP BPE one is named directly:
    `open_clip.get_tokenizer` picks SigLIP's hub tokenizer for any name containing "siglip"."""
    if spec["source"] == "clip_bpe":
        return f"tokenizer = open_clip.SimpleTokenizer(context_length={spec['context_length']})"
    if spec["source"] in HF_TOKENIZED:
        return (f"tokenizer = open_clip.tokenizer.HFTokenizer({str(wordpiece_folder())!r}, context_length={spec['context_length']}, "
                f"clean={HF_TOKENIZED[spec['source']]!r})")
    return f"tokenizer = open_clip.get_tokenizer({spec['source']!r}, context_length={spec['context_length']})"
