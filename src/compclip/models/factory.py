"""`load_model`: one entry point for every way a user names a model.

open_clip names with a pretrained tag or weights file, `hf-hub:` ids, `local-dir:` folders
and compclip checkpoint folders all come back as `(model, preprocess, tokenizer)`, the
model carrying the spec (`compclip_spec`) that `save_checkpoint` needs to rebuild it.
"""
from __future__ import annotations

import contextlib
import copy
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import open_clip
import torch
from open_clip.tokenizer import HFTokenizer
from open_clip.transform import PreprocessCfg, image_transform_v2

from ..errors import DataError, DownloadError, MissingFileError, UsageError
from ..extras import need
from ..text import did_you_mean
from . import bundled, hf_folders
from .checkpoint import (
    CONFIG_NAME,
    DIGEST_ATTR,
    SPEC_ATTR,
    WEIGHTS_NAME,
    check_checkpoint_folder,
    load_weights,
    model_name,
    trained_activation,
    unwrap,
)
from .released import (
    HUB_CONFIG,
    OPEN_CLIP_WEIGHTS,
    absent_from_hub,
    get_released,
    is_released,
    list_released,
    offline_command,
    resolve,
)

log = logging.getLogger("compclip.models")


class LazyTokenizer:
    """Builds the tokenizer on first use, so a model whose tokenizer lives on the hub still loads offline.

    `source` is "clip_bpe" (the CLIP BPE open_clip ships), a bundled model tokenized by `HFTokenizer`
    (`bundled.HF_TOKENIZED`), or an open_clip model name whose tokenizer `open_clip.get_tokenizer` knows.
    It remembers the rows of the last `cache_size` distinct texts, in one memory shared by every tokenizer of the
    same source and length in the process (a DataLoader worker starts from a copy of it, then keeps its own):
    training captions come back every epoch, a benchmark's texts come back for every model scored, and BPE costs far
    more than a lookup. Our own memory, not `functools.lru_cache`: that keeps one call's answer, and a batch's new
    texts are tokenized in one call; the oldest rows go first.
    """

    cache_size = 65_536
    _shared: ClassVar[dict[tuple[str, int], dict[str, torch.Tensor]]] = {}

    def __init__(self, source: str, context_length: int):
        self.source, self.context_length = source, context_length
        self._tokenizer = None
        self._rows = LazyTokenizer._shared.setdefault((source, context_length), {})

    @property
    def spec(self) -> dict[str, Any]:
        return {"source": self.source, "context_length": self.context_length}

    def _build(self):
        if self._tokenizer is None:
            if self.source == "clip_bpe":
                self._tokenizer = open_clip.SimpleTokenizer(context_length=self.context_length)
            elif self.source in bundled.HF_TOKENIZED:
                _need_transformers(self.source)
                folder = str(bundled.wordpiece_folder())
                self._tokenizer = HFTokenizer(folder, self.context_length, clean=bundled.HF_TOKENIZED[self.source])
            else:
                _refuse_remote_code(self.source)
                try:
                    self._tokenizer = open_clip.get_tokenizer(self.source, context_length=self.context_length)
                except ImportError:
                    _need_transformers(self.source)
                    raise
                except Exception as e:
                    said = str(e).strip().splitlines()[0].rstrip(" .") if str(e).strip() else "no reason given"
                    raise DownloadError(
                        f"the tokenizer of {self.source} could not be loaded ({type(e).__name__}: {said}). "
                        "SigLIP-family tokenizers come from the Hugging Face hub: fetch them once online "
                        "or point HF_HOME at a cache that holds them"
                    ) from e
        return self._tokenizer

    def __call__(self, texts, context_length: int | None = None) -> torch.Tensor:
        if context_length not in (None, self.context_length):
            return self._build()(texts, context_length=context_length)
        texts = [texts] if isinstance(texts, str) else list(texts)
        new = [t for t in dict.fromkeys(texts) if t not in self._rows]
        if new:
            self._rows.update(zip(new, self._build()(new).clone(), strict=True))
            for old in list(self._rows)[: max(0, len(self._rows) - self.cache_size)]:  # the oldest first
                del self._rows[old]
        if any(t not in self._rows for t in texts):  # more new texts in one call than the cache holds
            return self._build()(texts)
        return torch.stack([self._rows[t] for t in texts]) if texts else self._build()(texts)

    def __getstate__(self) -> dict[str, Any]:  # a DataLoader worker starts with an empty cache
        return {**self.__dict__, "_rows": {}}

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._build(), name)


def _refuse_remote_code(source: str) -> None:
    """open_clip passes a config's `tokenizer_kwargs` to transformers' `AutoTokenizer`, so a `local-dir:` folder or hub
    repository whose `open_clip_config.json` sets `trust_remote_code` would import and run that folder's Python. compclip
    never takes that setting from a file."""
    schema, _, where = source.partition(":")
    try:
        if schema == "local-dir":
            config = json.loads((Path(where) / "open_clip_config.json").read_text(encoding="utf-8"))
        elif schema == "hf-hub":
            from open_clip.factory import _get_hf_config

            config = _get_hf_config(where)
        else:
            return
        asked = config["model_cfg"]["text_cfg"]["tokenizer_kwargs"].get("trust_remote_code")
    except Exception:  # a config that cannot be read or fetched: open_clip's own loading reports it, with its reason
        return
    if asked:
        raise DataError(f"the tokenizer {source}: its open_clip_config.json asks to run the tokenizer's own Python "
                        "(tokenizer_kwargs.trust_remote_code); compclip never runs code a downloaded or given file asks for")


def _refuse_absent_hub_weights(name: str) -> None:
    """An `hf-hub:` repository's config and weights, found in the Hugging Face cache (or downloaded) before the model is
    built: where the weights cannot be had, open_clip builds the repository's architecture from its config alone,
    randomly initialised, after a logged warning, and every score would be a random model's."""
    from huggingface_hub import hf_hub_download
    from open_clip.pretrained import download_pretrained_from_hf

    repo = name.removeprefix("hf-hub:")
    try:
        hf_hub_download(repo, HUB_CONFIG)
    except Exception as e:
        raise absent_from_hub(name, f"{repo}/{HUB_CONFIG}, its architecture,", e) from None
    try:
        download_pretrained_from_hf(repo)
    except Exception as e:
        raise absent_from_hub(name, f"{repo}/{' or '.join(OPEN_CLIP_WEIGHTS)}, its weights,", e) from None


def _fetch_tag_weights(name: str, tag: str) -> None:
    """An open_clip tag's weights, found in the Hugging Face cache (or downloaded) before the model is built, so that one
    line says what is missing, where it was looked for and how a copy loads: open_clip would log an error and raise a
    second one."""
    from open_clip.pretrained import download_pretrained

    cfg = open_clip.get_pretrained_cfg(name, tag)
    try:
        download_pretrained(cfg)
    except Exception as e:
        hub = cfg.get("hf_hub", "").strip("/")
        what = f"{hub}/{' or '.join(OPEN_CLIP_WEIGHTS)}" if hub else cfg.get("url", "its weights file")
        raise absent_from_hub(f"{name} {tag}", what, e, offline_command(name)) from None


def _refuse_absent_tokenizer(config: Path, source: str) -> None:
    """A checkpoint's tokenizer that is not there, refused when the checkpoint loads: open_clip tokenizes a model name it
    does not know with its default CLIP BPE after a generic warning, and reports a missing folder or repository only at
    the first caption, as a download to retry."""
    missing = _tokenizer_not_there(source)
    if missing:
        raise DataError(f"{config}: its tokenizer {source} is not there ({missing}); compclip tokenizes with no other in its "
                        "place (every score would change)")


def _tokenizer_not_there(source: str) -> str | None:
    """Where a tokenizer source was looked for and not found; None where it is there, or only a download can tell (a hub
    repository, online)."""
    if source == "clip_bpe" or source in bundled.HF_TOKENIZED:
        return None
    if source.startswith("local-dir:"):
        config = Path(source.removeprefix("local-dir:")) / "open_clip_config.json"
        return None if config.is_file() else f"no {config}"
    if source.startswith("hf-hub:"):
        from huggingface_hub import constants, try_to_load_from_cache

        files = ("open_clip_config.json", "tokenizer_config.json", "tokenizer.json")
        repo, cache = source.removeprefix("hf-hub:"), constants.HF_HUB_CACHE
        if not constants.HF_HUB_OFFLINE or any(isinstance(try_to_load_from_cache(repo, f, cache_dir=cache), str) for f in files):
            return None
        return f"offline, and the Hugging Face cache {cache} holds none of its {', '.join(files)}"
    return None if open_clip.get_model_config(source) is not None else "open_clip knows no model of that name"


def _need_transformers(source: str) -> None:
    need("transformers", f"the tokenizer of {source} (a Hugging Face one)")


def _tokenizer_for(name: str, cfg: dict[str, Any]) -> LazyTokenizer:
    # bundled configs use the CLIP BPE whatever their name says ("siglip" names make open_clip reach for the hub's
    # SigLIP tokenizer), or their own Hugging Face tokenizer
    source = name if name in bundled.HF_TOKENIZED else "clip_bpe" if name in bundled.BUNDLED_MODELS else name
    return LazyTokenizer(source, cfg["text_cfg"].get("context_length", open_clip.tokenizer.DEFAULT_CONTEXT_LENGTH))


class _NoRandomInitWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "initialized randomly" not in record.getMessage()


_SAID_RANDOM: set[str] = set()  # bundled models whose random initialisation this process has mentioned


@contextlib.contextmanager
def _weights_follow(really: bool = True):
    """Hide open_clip's "initialized randomly" warning when we load the weights right after, or the model is one
    compclip bundles (random by design, said once: `_SAID_RANDOM`)."""
    root = logging.getLogger()
    quiet = _NoRandomInitWarning()
    if really:
        root.addFilter(quiet)
    try:
        yield
    finally:
        root.removeFilter(quiet)


# torch.nn.init's in-place fills, which a module's constructor reaches through the module (`init.kaiming_uniform_(...)`)
_INIT_FILLS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_", "xavier_uniform_",
               "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_")


@contextlib.contextmanager
def _every_weight_loaded(really: bool = True):
    """Build a model without torch.nn.init's random fills, where every weight is loaded strictly right after (a checkpoint
    folder, a weights file, an open_clip tag, an `hf-hub:` repository's weights, found first): a ViT-B's fills take
    seconds of each load, and a strict load overwrites each one. The fills are torch's module-wide functions, swapped for
    the block: a model built at the same time in another thread of the process would be left unfilled too (compclip
    builds its models in one thread)."""
    if not really:
        yield
        return
    kept = {name: getattr(torch.nn.init, name) for name in _INIT_FILLS}
    for name in _INIT_FILLS:
        setattr(torch.nn.init, name, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for name, fill in kept.items():
            setattr(torch.nn.init, name, fill)


def model_config(name: str) -> dict[str, Any]:
    """open_clip's config of an architecture, hub id or folder; an unknown name is one line with the nearest names of
    open_clip's and the registry's (a sweep checks every name of its list by it before any model loads)."""
    try:
        cfg = open_clip.get_model_config(name if ":" in name else name.replace("/", "-"))
    except Exception as e:  # hf-hub config fetch
        raise DownloadError(f"could not fetch the config of {name} ({type(e).__name__}: {e})") from e
    if cfg is None:
        if ":" not in name and ("/" in name or "\\" in name):  # a path (open_clip's `ViT-B/32` is found above, a hub id has
            # its `hf-hub:`): say which part of it is missing
            raise MissingFileError(f"{name}: no such folder{_missing_part(Path(name))}")
        known = [*open_clip.list_models(), *list_released()]
        raise UsageError(f"unknown model {name!r}{did_you_mean(name, known, n=3)} (open_clip.list_models() lists the architectures, "
                         "`compclip models` the released checkpoints' ids)")
    return cfg


def _missing_part(path: Path) -> str:
    """Where a path that is no folder stops existing: " (runs/c2lip has no checkpoints)", or "" when none of it exists."""
    for parent in path.parents:
        if str(parent) not in ("", ".") and parent.is_dir():
            return f" ({parent} has no {path.relative_to(parent).parts[0]})"
    return ""


def load_model(
    name: str,
    pretrained: str | None = None,
    device: str | torch.device = "cpu",
    *,
    precision: str = "fp32",
    force_quick_gelu: bool = False,
    force_context_length: int | None = None,
    force_image_size: int | None = None,
    force_patch_dropout: float | None = None,
    force_custom_text: bool = False,
    init_seed: int | None = 0,
    weights_follow: bool = False,
) -> tuple[torch.nn.Module, Callable, LazyTokenizer]:
    """Build an open_clip model from a name, tag, file, hub id or checkpoint folder.

    `pretrained` is an open_clip tag (downloaded by open_clip) or a weights file
    (`.pt`, `.bin`, `.safetensors`), loaded strictly and never unpickling code. A model built without
    weights (a bundled config, an architecture to train from scratch) is initialised from `init_seed`, the
    same weights on every load in every process, the caller's random state untouched; None draws them
    from the caller's generator (a trainer that seeds it itself).
    The `force_*` overrides are open_clip's `create_model` ones, recorded in the model's config. `weights_follow`: the
    caller loads weights into it next (a resumed run), so nothing says the model is initialised randomly.
    Returns `(model, preprocess, tokenizer)`: the model in eval mode, the evaluation preprocessing.
    """
    name, resolved = model_name(name), None
    if is_released(name):  # a released checkpoint's id (`compclip models`): its architecture and weights file or tag
        resolved = resolve(get_released(name), pretrained)
        name, pretrained = resolved.model, resolved.pretrained
    folder = Path(name)
    forced = {"force_quick_gelu": force_quick_gelu, "force_context_length": force_context_length, "force_image_size": force_image_size,
              "force_patch_dropout": force_patch_dropout, "force_custom_text": force_custom_text}
    if name.startswith(hf_folders.PREFIX):  # a transformers folder is told by its config.json (`read_config`)
        raise UsageError(f"{name} is a transformers model: `compclip eval --model {name}` scores it; training, export and "
                         "the other commands take open_clip models")
    if folder.is_dir() and ":" not in name:
        if pretrained:
            raise UsageError(f"{name} is a compclip checkpoint folder: it brings its own weights, drop pretrained=")
        given = [k for k, v in forced.items() if v not in (None, False)]
        if given:
            raise UsageError(f"{name} is a compclip checkpoint folder: its architecture is the one it was trained in; "
                             f"--{given[0].replace('_', '-')} applies to an open_clip model name")
        return _load_checkpoint_folder(folder, device, precision)
    if folder.is_file():
        raise UsageError(f"{name} is a weights file: give the architecture as the name and the file as pretrained=")
    hub = name.startswith("hf-hub:")
    if hub:
        _refuse_absent_hub_weights(name)

    cfg = copy.deepcopy(model_config(name))
    if force_quick_gelu:
        cfg["quick_gelu"] = True
    if force_context_length is not None:
        cfg["text_cfg"]["context_length"] = force_context_length
    if force_image_size is not None:
        cfg["vision_cfg"]["image_size"] = force_image_size
    if force_patch_dropout is not None:
        cfg["vision_cfg"]["patch_dropout"] = force_patch_dropout
    if force_custom_text:
        cfg["custom_text"] = True

    weights_file = tag = None
    if pretrained:
        if Path(pretrained).is_file():
            weights_file = Path(pretrained)
        elif ":" in name:
            raise UsageError(f"{name} names its own weights; pretrained={pretrained!r} would be ignored")
        elif open_clip.get_pretrained_cfg(name, pretrained):
            tag = pretrained
        else:
            tags = open_clip.list_pretrained_tags_by_model(name)
            raise UsageError(f"pretrained={pretrained!r} is neither a file nor a tag of {name} (tags: {tags})")
        _check_activation(name, cfg, weights_file, tag)
    if tag is not None:
        _fetch_tag_weights(name, tag)
    seeded = init_seed is not None and tag is None and not hub
    random_by_design = name in bundled.BUNDLED_MODELS and weights_file is None and tag is None
    if random_by_design and not weights_follow and name not in _SAID_RANDOM:  # open_clip warns at every load; once a process is enough
        _SAID_RANDOM.add(name)
        log.info("%s: a model compclip bundles, initialised randomly (it has no pretrained weights)", name)
    try:
        with _weights_follow(weights_file is not None or random_by_design or weights_follow), _seeded(init_seed if seeded else None), \
                _every_weight_loaded(weights_file is not None or tag is not None or hub):
            model = open_clip.create_model(
                name,
                pretrained=tag,
                device=device,
                precision=precision,
                **forced,
            )
    except RuntimeError as e:
        if tag or hub:
            raise DownloadError(f"could not fetch the weights of {name} {tag or ''} ({e})") from e
        raise
    if weights_file is not None:
        setattr(model, DIGEST_ATTR, load_weights(model, weights_file))
    tokenizer = _tokenizer_for(resolved.tokenizer if resolved is not None and resolved.tokenizer else name, cfg)
    _attach_spec(model, name, cfg, str(pretrained) if pretrained else None, tokenizer)
    if resolved is not None:  # its weights loaded: a first load's hash is recorded now, never a refused file's
        resolved.loaded()
    return model.eval(), eval_preprocess(model), tokenizer


def _check_activation(name: str, cfg: dict[str, Any], file: Path | None, tag: str | None) -> None:
    """Refuse weights trained with QuickGELU under a GELU config, or the reverse, where the file or tag says which:
    the model would run and score, every number quietly wrong (an OpenAI checkpoint under ViT-B-32 rather than
    ViT-B-32-quickgelu)."""
    if file is not None:
        quick, how = trained_activation(file)
        source = f"{file}: {how}"
    else:
        quick = open_clip.get_pretrained_cfg(name, tag).get("quick_gelu") if tag else None
        source = f"pretrained={tag!r} of {name} was trained with {'QuickGELU' if quick else 'GELU'}"
    runs = bool(cfg.get("quick_gelu", False))
    if quick is None or quick == runs:
        return
    models = open_clip.list_models()
    if quick:
        twin = f"{name}-quickgelu" if f"{name}-quickgelu" in models else None
        fix = f"load it as {twin}" if twin else "load it with force_quick_gelu=True"
    else:
        twin = name.removesuffix("-quickgelu") if name.endswith("-quickgelu") and name.removesuffix("-quickgelu") in models else None
        fix = f"load it as {twin}" if twin else "load it under a config without quick_gelu"
    raise UsageError(f"{source}, but {name} runs {'GELU' if quick else 'QuickGELU'}: {fix} (every score would change otherwise)")


@contextlib.contextmanager
def _seeded(seed: int | None):
    """The CPU generator seeded for the block and restored after it (None: untouched)."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        yield


def _load_checkpoint_folder(folder: Path, device, precision: str):
    config = check_checkpoint_folder(folder)
    _refuse_absent_tokenizer(folder / CONFIG_NAME, config["tokenizer"]["source"])
    # a timm tower trained at a forced image size: open_clip sets it through set_input_size, for force_image_size alone
    size = config["model_cfg"].get("vision_cfg", {}).get("image_size")
    named = open_clip.get_model_config(config["model_name"]) if ":" not in config["model_name"] else None
    forced = named is not None and "timm_model_name" in named.get("vision_cfg", {}) and named["vision_cfg"].get("image_size") != size
    resized = {"force_image_size": size} if forced else {}
    with _weights_follow(), _every_weight_loaded():
        model = open_clip.create_model(f"local-dir:{folder}", load_weights=False, device=device, precision=precision, **resized)
    setattr(model, DIGEST_ATTR, load_weights(model, folder / WEIGHTS_NAME))
    tokenizer = LazyTokenizer(**config["tokenizer"])
    _attach_spec(model, config["model_name"], config["model_cfg"], config.get("pretrained"), tokenizer)
    return model.eval(), eval_preprocess(model), tokenizer


def _attach_spec(model: torch.nn.Module, name: str, cfg: dict, pretrained: str | None, tokenizer: LazyTokenizer) -> None:
    preprocess_cfg = {k: list(v) if isinstance(v, tuple) else v for k, v in model.visual.preprocess_cfg.items()}
    spec = {"model_name": name, "model_cfg": cfg, "preprocess_cfg": preprocess_cfg, "tokenizer": tokenizer.spec, "pretrained": pretrained}
    setattr(model, SPEC_ATTR, spec)


def image_bytes(model: torch.nn.Module) -> int:
    """The bytes of one preprocessed image of this model (3 float32 channels at its input size): what a DataLoader worker
    passes through shared memory per image. A model that is no open_clip model (a caller's own tower) counts as 224 px."""
    visual = getattr(unwrap(model), "visual", None)
    size = getattr(visual, "preprocess_cfg", {}).get("size", 224)
    height, width = (size, size) if isinstance(size, int) else size
    return 3 * height * width * 4


def eval_preprocess(model: torch.nn.Module) -> Callable:
    """open_clip's evaluation preprocessing for this model's preprocessing config."""
    return image_transform_v2(PreprocessCfg(**model.visual.preprocess_cfg), is_train=False)


def train_preprocess(model: torch.nn.Module) -> Callable:
    """open_clip's training-time augmentation for this model's preprocessing config."""
    return image_transform_v2(PreprocessCfg(**model.visual.preprocess_cfg), is_train=True)
