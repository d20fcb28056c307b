"""Models: open_clip factory, bundled tiny configs, checkpoints."""
from . import bundled
from .bundled import BUNDLED_MODELS
from .checkpoint import (
    CheckpointMismatchError,
    load_weights,
    model_spec,
    read_state_dict,
    save_checkpoint,
    unwrap,
    weights_sha256,
)
from .factory import LazyTokenizer, eval_preprocess, image_bytes, load_model, train_preprocess

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
