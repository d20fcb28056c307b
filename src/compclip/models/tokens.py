"""Per-token outputs of open_clip towers, in the joint embedding space, from one forward pass.

C2LIP needs what global pooling throws away: every visual token mapped the way the pooled
vector is (through SigLIP's attention-pool value path), and the text encoder's per-token
states so a concept can be pooled over its own span of the caption.

open_clip's classes are imported by the functions that meet its models (a model in hand has loaded it): every
method's module imports this one, and `compclip methods` lists them without loading open_clip.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

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
    from open_clip.timm_model import TimmModel
    from open_clip.transformer import VisionTransformer

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
        if torch.is_grad_enabled() and x.requires_grad:  # recomputed in the backward pass: see _timm_tokens
            return pooled, checkpoint(_timm_tokens, visual, x, use_reentrant=False)
        return pooled, _timm_tokens(visual, x)
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


def _timm_tokens(visual: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A timm ViT's patch tokens `x` (B, M, width) mapped as its pooled vector is (`visual_token_embeddings`).

    Training recomputes this in the backward pass rather than keep its activations: through a MAP head every token
    takes the head's MLP, whose (B, M, 4 × width) hidden layer and the rest kept about 1 GiB for C2LIP at ViT-B-16's
    batch of 256 (C2LIP's peak GPU memory was 1.08× open_clip_train's SigLIP), for 0.6 TFLOP of matrix products
    recomputed a step, against some 14 in the towers' forward and backward passes."""
    trunk = visual.trunk
    head = getattr(trunk, "attn_pool", None)
    if head is not None:
        if head.pos_embed is not None:
            x = x + head.pos_embed.unsqueeze(0).to(x.dtype)
        width = x.shape[-1]
        v = F.linear(x, head.kv.weight[width:], head.kv.bias[width:] if head.kv.bias is not None else None)
        v = head.proj_drop(head.proj(v))
        x = v + head.mlp(head.norm(v))
    return visual.head(trunk.head(trunk.head_drop(trunk.fc_norm(x))))


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
    from open_clip.model import CLIP
    from open_clip.transformer import TextTransformer, text_global_pool

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


@dataclasses.dataclass(frozen=True)
class TextWidth:
    """How far a causal text tower pooled at the end-of-text token reads a batch of token ids: up to its longest text,
    rounded up to a multiple of `multiple` (fewer shapes, aligned attention masks), never past the context.

    Measured where the ids are on the host, in the DataLoader worker that tokenized them (`Method.collate`): on a GPU
    the lengths would be read back from the device halfway through the forward pass, a wait for the image tower
    and a new sequence length every step."""

    pool: str
    eos: int | None
    multiple: int = 8

    def lengths(self, text: torch.Tensor) -> torch.Tensor:
        """Each text's positions up to and including its end-of-text token (over the last dimension)."""
        return (text.argmax(dim=-1) if self.pool == "argmax" else (text == self.eos).int().argmax(dim=-1)) + 1

    def __call__(self, text: torch.Tensor) -> int:
        longest = int(self.lengths(text).max()) if text.numel() else 1
        return min(text.shape[-1], -(-longest // self.multiple) * self.multiple)


def text_width(model: torch.nn.Module) -> TextWidth | None:
    """The `TextWidth` of a model whose text features cutting cannot change: a causal text tower pooled at the
    end-of-text token (CLIP). None otherwise (SigLIP's towers attend both ways and pool the last position)."""
    encoder = short_text_encoder(model)
    return None if encoder is None else TextWidth(encoder.pool, encoder.eos)


def _causal_tower(model: torch.nn.Module):
    """`(tower, pool, eos, positional, mask, projection)` of a causal text tower pooled at the end-of-text token, or None."""
    from open_clip.model import CLIP
    from open_clip.transformer import TextTransformer

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
    return tower, pool, eos, positional, mask, projection


class ShortTextEncoder:
    """`encode_text` for token batches cut where cutting cannot change the result: a causal tower pooled at the
    end-of-text token (CLIP's; `short_text_encoder` builds one).

    `encoder(text, width=None)`: on the CPU, where reading lengths costs nothing, the batch is cut after its longest
    text, or in two length groups (`length_groups`). Elsewhere nothing is read from the device: the batch is cut at
    `width` (its `TextWidth`, measured on the host), or read over its whole context when no width is given, as
    `encode_text` reads it (`encoder.cut`)."""

    def __init__(self, tower, pool, eos, positional, mask, projection):
        self.tower, self.pool, self.eos, self.positional, self.mask = tower, pool, eos, positional, mask
        self.project = _projector(projection)
        self.measure = TextWidth(pool, eos, multiple=1)

    def cut(self, text: torch.Tensor, n: int) -> torch.Tensor:
        """The features of `text` read over its first `n` positions alone."""
        from open_clip.transformer import text_global_pool

        text = text[:, :n]
        cast_dtype = self.tower.transformer.get_cast_dtype()
        x = self.tower.token_embedding(text).to(cast_dtype) + self.positional[:n].to(cast_dtype)
        x = self.tower.ln_final(self.tower.transformer(x, attn_mask=self.mask[:n, :n]))
        return self.project(text_global_pool(x, text, self.pool, eos_token_id=self.eos))

    def __call__(self, text: torch.Tensor, width: int | None = None) -> torch.Tensor:
        if text.device.type != "cpu":
            return self.cut(text, text.shape[-1] if width is None else width)
        lengths = self.measure.lengths(text)
        groups = length_groups(lengths)
        if len(groups) == 1:
            return self.cut(text, int(lengths.max()))
        order = torch.cat(groups)
        features = torch.cat([self.cut(text[g], int(lengths[g].max())) for g in groups])
        return features[order.argsort()]


def short_text_encoder(model: torch.nn.Module) -> ShortTextEncoder | None:
    """The model's `ShortTextEncoder`, or None where cutting would change its text features (SigLIP's towers attend
    both ways and pool the last position)."""
    causal = _causal_tower(model)
    return None if causal is None else ShortTextEncoder(*causal)


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


GPU_ROWS = 32  # off the CPU (a GPU) the text tower meets a batch of texts in rows padded up to a multiple of this


def encode_short_texts(model: torch.nn.Module, text: torch.Tensor, width: int | None = None) -> torch.Tensor:
    """`model.encode_text(text)`, cut where cutting cannot change it (`short_text_encoder`; `width`, the batch's
    `TextWidth` measured on the host, is where a GPU cuts): noun phrases and graph nodes of a few tokens then cost a
    few positions, not the whole context.

    Off the CPU (on a GPU) the rows are padded up to a multiple of `GPU_ROWS` (`pad_rows`), the padding's features
    dropped: a token field whose count changes every step (a batch's negatives, its graph texts) then reaches the tower
    in a few shapes, not a new one each step, which a GPU's attention kernels may set up anew (docs/benchmarks.md: the
    slow steps of hardneg, negclip and OC-CLIP on an H200). On a CPU, where a shape costs nothing, the rows are as
    given."""
    encode = short_text_encoder(model)
    rows = text if text.device.type == "cpu" else pad_rows(text, GPU_ROWS)
    features = model.encode_text(rows) if encode is None else encode(rows, width)
    return features[: text.shape[0]]


def pad_rows(text: torch.Tensor, multiple: int) -> torch.Tensor:
    """`text` (N, L) with copies of its first row after it, up to a multiple of `multiple` rows (none where N is a
    multiple already, or 0): a real text, no longer than the batch's longest, so a width measured for the batch still holds."""
    short = -text.shape[0] % multiple
    return torch.cat([text, text[:1].expand(short, -1)]) if short and text.shape[0] else text


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
