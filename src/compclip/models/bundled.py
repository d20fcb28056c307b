"""Small model configs shipped with compclip, registered with open_clip (and timm) on import.

They mirror the real architectures at toy size so that everything runs offline in seconds:
`compclip-tiny-clip` is an open_clip ViT with a class token, `compclip-tiny-siglip` a timm
ViT with SigLIP's attention-pool (`map`) head and sigmoid logit bias. Both use the CLIP BPE
tokenizer, which open_clip ships (SigLIP's own tokenizer lives on the hub).
"""
from __future__ import annotations

from pathlib import Path

import open_clip
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.vision_transformer import VisionTransformer

CONFIG_DIR = Path(__file__).parent / "configs"
BUNDLED_MODELS = tuple(sorted(p.stem for p in CONFIG_DIR.glob("*.json")))

# timm looks up a model's default pretrained config in its module's `default_cfgs`.
default_cfgs = generate_default_cfgs(
    {"compclip_vit_tiny_patch8_siglip_64": {"input_size": (3, 64, 64), "mean": (0.5,) * 3, "std": (0.5,) * 3, "num_classes": 0}}
)


@register_model
def compclip_vit_tiny_patch8_siglip_64(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """SigLIP-style ViT (no class token, attention-pool head) at 64 px, 2 blocks of width 64."""
    args = {"img_size": 64, "patch_size": 8, "embed_dim": 64, "depth": 2, "num_heads": 2, "class_token": False, "global_pool": "map"}
    return build_model_with_cfg(
        VisionTransformer, "compclip_vit_tiny_patch8_siglip_64", pretrained, **dict(args, **kwargs)
    )


open_clip.add_model_config(CONFIG_DIR)
