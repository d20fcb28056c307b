"""Small model configs shipped with compclip, registered with open_clip (and timm) on import.

They mirror the real architectures at toy size so that everything runs offline in seconds:
`compclip-tiny-clip` is an open_clip ViT with a class token, `compclip-tiny-siglip` a timm
ViT with SigLIP's attention-pool (`map`) head and sigmoid logit bias, and `compclip-tiny-siglip-conv`
the same with a convolutional stem in place of the linear patch embedding (the binding world's demo
model: at this size a linear 8×8 patch embedding does not learn shape, `docs/benchmarks.md`). All use
the CLIP BPE tokenizer, which open_clip ships (SigLIP's own tokenizer lives on the hub).
"""
from __future__ import annotations

from pathlib import Path

import open_clip
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.vision_transformer import VisionTransformer
from torch import nn

CONFIG_DIR = Path(__file__).parent / "configs"
BUNDLED_MODELS = tuple(sorted(p.stem for p in CONFIG_DIR.glob("*.json")))

# timm looks up a model's default pretrained config in its module's `default_cfgs`.
_TINY_CFG = {"input_size": (3, 64, 64), "mean": (0.5,) * 3, "std": (0.5,) * 3, "num_classes": 0}
default_cfgs = generate_default_cfgs({"compclip_vit_tiny_patch8_siglip_64": _TINY_CFG, "compclip_vit_tiny_conv8_siglip_64": _TINY_CFG})


class ConvStem(nn.Module):
    """timm's patch-embedding interface: three 3×3 stride-2 convolutions (GroupNorm, GELU) down to the 8×8-pixel
    patch grid, then a 1×1 projection. GroupNorm is per sample, so 2 processes still equal 1 (BatchNorm would not)."""

    def __init__(self, img_size: int = 64, patch_size: int = 8, in_chans: int = 3, embed_dim: int = 64, **_):
        super().__init__()
        chans, layers = [in_chans, 16, 32, 64], []
        for i in range(3):
            layers += [nn.Conv2d(chans[i], chans[i + 1], 3, 2, 1), nn.GroupNorm(8, chans[i + 1]), nn.GELU()]
        self.proj = nn.Sequential(*layers, nn.Conv2d(64, embed_dim, 1))
        self.img_size, self.patch_size = (img_size, img_size), (8, 8)
        self.grid_size = (img_size // 8, img_size // 8)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.dynamic_img_pad = False

    def feat_ratio(self, as_scalar: bool = True) -> int:
        return 8

    def dynamic_feat_size(self, img_size):
        return self.grid_size

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


@register_model
def compclip_vit_tiny_patch8_siglip_64(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """SigLIP-style ViT (no class token, attention-pool head) at 64 px, 2 blocks of width 64."""
    args = {"img_size": 64, "patch_size": 8, "embed_dim": 64, "depth": 2, "num_heads": 2, "class_token": False, "global_pool": "map"}
    return build_model_with_cfg(
        VisionTransformer, "compclip_vit_tiny_patch8_siglip_64", pretrained, **dict(args, **kwargs)
    )


@register_model
def compclip_vit_tiny_conv8_siglip_64(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """The same ViT with `ConvStem` for its patch embedding: same 8×8 token grid, and it learns shape."""
    args = {"img_size": 64, "patch_size": 8, "embed_dim": 64, "depth": 2, "num_heads": 2, "class_token": False, "global_pool": "map",
            "embed_layer": ConvStem}
    return build_model_with_cfg(VisionTransformer, "compclip_vit_tiny_conv8_siglip_64", pretrained, **dict(args, **kwargs))


open_clip.add_model_config(CONFIG_DIR)
