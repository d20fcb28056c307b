"""Small model configs shipped with compclip, registered with open_clip (and timm) on import.

They mirror the real architectures at toy size so that everything runs offline in seconds:
`compclip-tiny-clip` is an open_clip ViT with a class token, `compclip-tiny-siglip` a timm
ViT with SigLIP's attention-pool (`map`) head and sigmoid logit bias, and `compclip-tiny-siglip-conv`
the same with a convolutional stem in place of the linear patch embedding (at this size a linear 8×8
patch embedding does not learn shape, `docs/benchmarks.md`). `compclip-tiny-world`, the binding world's
demo model, has that image tower and CLIP's text tower (causal mask, pooled at the end-of-text token) of
context 40: SigLIP's bidirectional tower pooled at the last position reads a short statement through 50
padding positions, and at this size, fine-tuned on such statements, did not tell "a red square above a blue
star" from its swap (docs/history.md). These use
the CLIP BPE tokenizer, which open_clip ships. `compclip-tiny-siglip-hf` tokenizes as the SigLIP models
do, through open_clip's `HFTokenizer` with `clean="canonicalize"` (lower case, punctuation removed), over a
small WordPiece vocabulary built here on first use (SigLIP's own tokenizer lives on the hub).
"""
from __future__ import annotations

import os
from pathlib import Path

import open_clip
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.vision_transformer import VisionTransformer
from torch import nn

CONFIG_DIR = Path(__file__).parent / "configs"
BUNDLED_MODELS = tuple(sorted(p.stem for p in CONFIG_DIR.glob("*.json")))
HF_TOKENIZED = {"compclip-tiny-siglip-hf": "canonicalize"}  # bundled models tokenized by `HFTokenizer`, with its `clean`

# The WordPiece vocabulary: special tokens, then whole words, then letters and digits alone and as word pieces, so that
# every lower-case ASCII word tokenizes (into pieces where it is not a word here); any other character is [UNK].
_SPECIALS = ("[PAD]", "[UNK]", "</s>")
_WORDS = tuple("""a an the and or of in on at to with by from near next left right above below under over behind front
back top bottom middle is are was were there it its this that these those one two three four five six seven eight nine ten
red orange yellow green blue purple pink brown black white gray grey cyan large small big little tall short long round
square circle triangle star cross diamond hexagon heart shape shapes object objects something we see you can man woman
person people child boy girl dog cat horse bird car bus truck bike train boat plane table chair couch bed cup plate bowl
house tree grass water street road shirt hat ball sky wall floor photo picture image""".split())  # noqa: SIM905
_CHARACTERS = tuple("abcdefghijklmnopqrstuvwxyz0123456789")
WORDPIECE_VOCAB = (*_SPECIALS, *_WORDS, *(c for c in _CHARACTERS if c not in _WORDS), *(f"##{c}" for c in _CHARACTERS))


def wordpiece_folder() -> Path:
    """The folder of `compclip-tiny-siglip-hf`'s tokenizer in Hugging Face's format (what `AutoTokenizer` loads),
    written once under the user's cache (`$XDG_CACHE_HOME/compclip`, else `~/.cache/compclip`), one per transformers
    major version: 5.x saves a tokenizer class (`TokenizersBackend`) that 4.x cannot load."""
    import transformers
    from transformers import PreTrainedTokenizerFast

    from ..io import atomic_dir

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "compclip" / "tokenizers"
    folder = cache / f"compclip-wordpiece-{len(WORDPIECE_VOCAB)}-transformers{transformers.__version__.split('.')[0]}"
    if not (folder / "tokenizer.json").is_file():
        from tokenizers import Tokenizer, models, pre_tokenizers, processors

        core = Tokenizer(models.WordPiece({t: i for i, t in enumerate(WORDPIECE_VOCAB)}, unk_token="[UNK]"))
        core.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        core.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])  # SigLIP's T5: EOS last
        with atomic_dir(folder) as tmp:
            PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]", eos_token="</s>").save_pretrained(tmp)
    return folder

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
