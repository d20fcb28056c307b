"""A checkpoint saved by EVA-CLIP's own code (baaivision/EVA's EVA-CLIP, which FineCLIP fine-tunes in) renamed into
open_clip's EVA02 models, once, when the hand-downloaded file is converted (`_state_dict_file`): open_clip builds EVA02
from timm's `Eva` tower and its EVA02 tags were converted from EVA-CLIP's own files, so the same renaming loads a
fine-tune of them under the same architecture (FineCLIP's ViT-B/16 under `EVA02-B-16`).

What the renaming is, read from the released code:

- The file: FineCLIP's `training/main.py` (Timsty1/FineCLIP@8095da3) saves `{"epoch", "name", "state_dict", "optimizer"}`,
  the state dict that of the unwrapped model (`model.module.state_dict()` in a distributed run); its evaluation scripts
  load it through `eva_clip.create_model(..., force_custom_clip=True)`, whose `load_state_dict` strips a `module.` prefix
  if one is there. The model is EVA-CLIP's `CustomCLIP`: `visual` (`eva_vit_model.EVAVisionTransformer`), `text`
  (`transformer.TextTransformer`) and `logit_scale`.
- The text tower: EVA-CLIP's `TextTransformer` keeps open_clip's module names (`token_embedding`, `positional_embedding`,
  `transformer.resblocks.N.{ln_1, attn.in_proj_weight, attn.in_proj_bias, attn.out_proj, ln_2, mlp.c_fc, mlp.c_proj}`,
  `ln_final`, `text_projection`), as open_clip's `CustomTextCLIP` has them under `text.`: kept as they are.
- The image tower: open_clip puts timm's `Eva` under `visual.trunk.`; timm's `eva.py` `checkpoint_filter_fn` (timm 1.0)
  renames EVA-CLIP's block keys: `attn.inner_attn_ln` to `attn.norm`, `mlp.ffn_ln` to `mlp.norm`, the SwiGLU's `mlp.w1`,
  `mlp.w2`, `mlp.w3` to `mlp.fc1_g`, `mlp.fc1_x`, `mlp.fc2`, and (its towers keeping q, k, v apart) `attn.q_bias`,
  `attn.v_bias` to `attn.q_proj.bias`, `attn.v_proj.bias`; `cls_token`, `pos_embed`, `patch_embed.proj`, `norm1`,
  `norm2`, `attn.{q,k,v}_proj.weight`, `attn.proj`, `norm` and `head` keep their names. The rotary tables EVA-CLIP saves
  as buffers (`rope.freqs_cos`, `rope.freqs_sin`, once per block as well) are computed from the configuration and
  dropped, as timm drops them.

The result is loaded strictly (`load_weights`): a key of no EVA02 weight or of another shape (another size's
checkpoint) is one line naming it. A file with no EVA-CLIP image tower at all is refused here, naming the file.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ...errors import DataError

# EVA-CLIP's block keys as timm's Eva names them (timm models/eva.py checkpoint_filter_fn), in the order applied
BLOCK_RENAMES = (("attn.q_bias", "attn.q_proj.bias"), ("attn.v_bias", "attn.v_proj.bias"), ("attn.inner_attn_ln.", "attn.norm."),
                 ("mlp.ffn_ln.", "mlp.norm."), ("mlp.w1.", "mlp.fc1_g."), ("mlp.w2.", "mlp.fc1_x."), ("mlp.w3.", "mlp.fc2."))


def to_open_clip(state: dict[str, torch.Tensor], file: Path) -> dict[str, torch.Tensor]:
    """The state dict of open_clip's EVA02 model from EVA-CLIP's one (`module.` prefixes dropped, rotary tables dropped,
    the image tower's keys renamed under `visual.trunk.`, the rest as they are)."""
    if not any(k.removeprefix("module.") == "visual.pos_embed" for k in state):
        raise DataError(f"{file}: no visual.pos_embed, so no EVA-CLIP image tower where the release keeps its weights "
                        "(another release's file, or one saved by other code)")
    converted = {}
    for key, value in state.items():
        key = key.removeprefix("module.")
        if key.startswith("visual."):
            if "rope." in key:
                continue
            key = "visual.trunk." + _timm_name(key.removeprefix("visual."))
        converted[key] = value
    return converted


def _timm_name(key: str) -> str:
    for eva, timm in BLOCK_RENAMES:
        key = key.replace(eva, timm)
    return key
