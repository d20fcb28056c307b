"""Models: open_clip factory, bundled tiny configs, checkpoints.

Nothing here imports open_clip until a name below is first read: `compclip models` lists the released checkpoints (and
`compclip methods` the methods, whose modules import `models.tokens`) without paying for open_clip, timm and
transformers. `factory` and `checkpoint` register the bundled configs with open_clip as they load; code that loads them with open_clip
alone imports `compclip.models.bundled`, which registers them (with timm, their image trunks), as `compclip export` prints."""
from ..lazy import lazy_names

__getattr__ = lazy_names(__name__, {
    "BUNDLED_MODELS": ".bundled", "CheckpointMismatchError": ".checkpoint", "load_weights": ".checkpoint",
    "model_spec": ".checkpoint", "read_state_dict": ".checkpoint", "save_checkpoint": ".checkpoint", "unwrap": ".checkpoint",
    "weights_sha256": ".checkpoint", "LazyTokenizer": ".factory", "eval_preprocess": ".factory", "image_bytes": ".factory",
    "load_model": ".factory", "train_preprocess": ".factory",
})

__all__ = [
    "BUNDLED_MODELS",
    "CheckpointMismatchError",
    "LazyTokenizer",
    "bundled",
    "eval_preprocess",
    "image_bytes",
    "load_model",
    "load_weights",
    "model_spec",
    "read_state_dict",
    "save_checkpoint",
    "train_preprocess",
    "unwrap",
    "weights_sha256",
]
