"""Per-token outputs of open_clip towers, in the joint embedding space, from one forward pass.

C2LIP needs what global pooling throws away: every visual token mapped the way the pooled
vector is (through SigLIP's attention-pool value path), and the text encoder's per-token
states so a concept can be pooled over its own span of the caption.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from open_clip.model import CLIP
from open_clip.timm_model import TimmModel
from open_clip.transformer import TextTransformer, VisionTransformer, text_global_pool

from ..errors import UsageError


def visual_token_embeddings(model: torch.nn.Module, images: torch.Tensor, layer: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """`(pooled, tokens)`: `pooled` is exactly `model.encode_image(images)`, `tokens` is (B, M, D).

    With SigLIP's attention-pool (MAP) head every final-layer token goes through the head's
    value path: the `v` half of `kv`, `proj`, the head's residual MLP, then whatever the pooled
    vector gets after the head. Other timm ViTs (a class token or average pooling: DINOv2,
    DeiT, ...) send each patch token through what the pooled vector gets after pooling (`fc_norm`,
    open_clip's projection); open_clip's own ViTs through the final layer norm and the projection,
    as the class token is (our choices).

    `layer` picks the block whose patch tokens are mapped (negative counts from the last, -1 is the
    last): an earlier block's tokens take the same final norm and mapping as the last block's
    (our choice; OC-CLIP reads earlier layers). Prefix tokens are left out there.
    """
    visual = model.visual
    if isinstance(visual, TimmModel) and hasattr(visual.trunk, "num_prefix_tokens"):  # the timm ViT family
        trunk = visual.trunk
        if layer == -1:
            features = trunk.forward_features(images)
            x = features if trunk.pool_include_prefix else features[:, trunk.num_prefix_tokens:]
        else:
            check_layer(model, layer)
            features, (inner,) = trunk.forward_intermediates(images, indices=[layer], output_fmt="NLC")
            x = trunk.norm(inner)
        pooled = visual.head(trunk.forward_head(features))
        head = getattr(trunk, "attn_pool", None)
        if head is not None:
            if head.pos_embed is not None:
                x = x + head.pos_embed.unsqueeze(0).to(x.dtype)
            width = x.shape[-1]
            v = F.linear(x, head.kv.weight[width:], head.kv.bias[width:] if head.kv.bias is not None else None)
            v = head.proj_drop(head.proj(v))
            x = v + head.mlp(head.norm(v))
        tokens = visual.head(trunk.head(trunk.head_drop(trunk.fc_norm(x))))
        return pooled, tokens
    if isinstance(visual, VisionTransformer) and visual.attn_pool is None:
        if layer == -1:
            pooled, tokens = _forward_with_tokens(visual, images)
            if visual.final_ln_after_pool:
                tokens = visual.ln_post(tokens)
        else:
            check_layer(model, layer)
            out = visual.forward_intermediates(images, indices=[layer], output_fmt="NLC")
            pooled, tokens = out["image_features"], visual.ln_post(out["image_intermediates"][0])
        return pooled, tokens @ visual.proj if visual.proj is not None else tokens
    raise UsageError(
        f"visual tokens are not available for {type(visual).__name__}: compclip supports open_clip ViTs and timm ViTs"
    )


def check_layer(model: torch.nn.Module, layer: int) -> None:
    """A clear error for a block index the vision tower lacks (before a run starts, not at its first step)."""
    visual = model.visual
    blocks = getattr(getattr(visual, "trunk", None), "blocks", None) or getattr(getattr(visual, "transformer", None), "resblocks", None)
    if blocks is None:
        return  # not a ViT: visual_token_embeddings says so
    depth = len(blocks)
    if not -depth <= layer < depth:
        raise UsageError(f"layer {layer} does not exist: the vision tower has {depth} blocks (layers -{depth}..{depth - 1})")


def text_token_states(model: torch.nn.Module, text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Callable]:
    """`(pooled, states, project)`: `pooled` is exactly `model.encode_text(text)`; `states` (B, L, W)
    are the final-layer token states (after the final layer norm) and `project` maps pooled
    states into the joint space as the text projection does.
    """
    if isinstance(model, CLIP):  # open_clip's built-in text tower lives on the model itself
        cast_dtype = model.transformer.get_cast_dtype()
        x = model.token_embedding(text).to(cast_dtype) + model.positional_embedding.to(cast_dtype)
        states = model.ln_final(model.transformer(x, attn_mask=model.attn_mask))
        pooled = text_global_pool(states, text, model.text_pool_type, eos_token_id=getattr(model, "text_eos_id", None))
        project = _projector(model.text_projection)
        return project(pooled), states, project
    tower = getattr(model, "text", None)
    if isinstance(tower, TextTransformer) and tower.cls_emb is None:
        pooled, states = _forward_with_tokens(tower, text)
        return pooled, states, _projector(tower.text_projection)
    raise UsageError(
        f"text token states are not available for {type(tower or model).__name__}: use concept mode 'separate'"
    )


def short_text_encoder(model: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """`encode_text` for token batches cut after their longest text, where cutting cannot change
    the result: a causal text tower pooled at the end-of-text token (CLIP). None otherwise
    (SigLIP's towers attend both ways and pool the last position)."""
    if isinstance(model, CLIP):
        tower, pool, eos = model, model.text_pool_type, getattr(model, "text_eos_id", None)
        positional, mask, projection = model.positional_embedding, model.attn_mask, model.text_projection
    elif isinstance(getattr(model, "text", None), TextTransformer):
        tower = model.text
        if tower.cls_emb is not None or tower.use_pad_mask:
            return None
        pool, eos = tower.pool_type, getattr(tower, "eos_id", None)
        positional, mask, projection = tower.positional_embedding, tower.attn_mask, tower.text_projection
    else:
        return None
    if mask is None or pool not in ("argmax", "eos"):
        return None
    project = _projector(projection)

    def cut(text: torch.Tensor, n: int) -> torch.Tensor:
        text = text[:, :n]
        cast_dtype = tower.transformer.get_cast_dtype()
        x = tower.token_embedding(text).to(cast_dtype) + positional[:n].to(cast_dtype)
        x = tower.ln_final(tower.transformer(x, attn_mask=mask[:n, :n]))
        return project(text_global_pool(x, text, pool, eos_token_id=eos))

    def encode(text: torch.Tensor) -> torch.Tensor:
        lengths = (text.argmax(dim=-1) if pool == "argmax" else (text == eos).int().argmax(dim=-1)) + 1
        groups = length_groups(lengths)
        if len(groups) == 1:
            return cut(text, int(lengths.max()))
        order = torch.cat(groups)
        features = torch.cat([cut(text[g], int(lengths[g].max())) for g in groups])
        return features[order.argsort()]

    return encode


def length_groups(lengths: torch.Tensor, saving: float = 0.25) -> list[torch.Tensor]:
    """The indices of a batch of texts in one group, or in two (the shorter ones, the longer ones) where cutting each
    after its own longest saves at least `saving` of the positions: a batch of statements and descriptions (the binding
    world's captions, a caption and its noun phrases) then pays for each at its own length."""
    n = len(lengths)
    order = lengths.argsort()
    ordered = lengths[order]
    if n < 2:
        return [order]
    split = torch.arange(1, n, device=lengths.device)
    cost = split * ordered[:-1] + (n - split) * ordered[-1]  # positions with the first `split` texts apart
    k = int(cost.argmin())
    if float(cost[k]) > (1 - saving) * n * float(ordered[-1]):
        return [torch.arange(n, device=lengths.device)]
    return [order[: k + 1], order[k + 1:]]


def encode_short_texts(model: torch.nn.Module, text: torch.Tensor) -> torch.Tensor:
    """`model.encode_text(text)`, cut after the longest text where cutting cannot change it (`short_text_encoder`):
    noun phrases and graph nodes of a few tokens then cost a few positions, not the whole context."""
    return (short_text_encoder(model) or model.encode_text)(text)


def _forward_with_tokens(tower: torch.nn.Module, x: torch.Tensor):
    """Run an open_clip tower with `output_tokens` switched on for this call only."""
    was = tower.output_tokens
    tower.output_tokens = True
    try:
        return tower(x)
    finally:
        tower.output_tokens = was


def _projector(projection) -> Callable[[torch.Tensor], torch.Tensor]:
    if projection is None:
        return lambda x: x
    if isinstance(projection, torch.nn.Linear):
        return projection
    return lambda x: x @ projection
