"""Hugging Face transformers export: open_clip CLIP models as `CLIPModel`, SigLIP models as `SiglipModel`.

Each open_clip tensor is renamed (attention's fused `in_proj`/`qkv` split into q, k, v), never re-trained. A part
with no transformers counterpart is refused with one line naming it. After converting, both models embed a probe
image and caption, and nothing is written unless they agree: a mapping this file does not know about cannot slip
through as a silently different model.
"""
from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from open_clip.tokenizer import HFTokenizer, SimpleTokenizer, bytes_to_unicode, default_bpe
from torch import nn

from ..errors import DownloadError, UsageError

AGREEMENT_TOLERANCE = 1e-4  # max |difference| of normalised fp32 embeddings, probe image and caption
_RESAMPLE = {"nearest": 0, "bilinear": 2, "bicubic": 3}  # PIL's numbers, which transformers' processors take


class UnmappableError(UsageError):
    """A part of the model that transformers' CLIPModel or SiglipModel cannot represent."""


def _act(module: nn.Module, where: str) -> str:
    """transformers' `hidden_act` name of an activation module."""
    name = type(module).__name__
    if name == "QuickGELU":
        return "quick_gelu"
    if name in ("GELU", "GELUTanh"):
        tanh = name == "GELUTanh" or getattr(module, "approximate", "none") == "tanh"
        return "gelu_pytorch_tanh" if tanh else "gelu"
    raise UnmappableError(f"{where}: activation {name} has no transformers counterpart (GELU, tanh GELU or QuickGELU)")


def _one(values: set, what: str, where: str):
    if len(values) != 1:
        raise UnmappableError(f"{where}: {what} differs between layers ({sorted(values)}): transformers keeps one per tower")
    return next(iter(values))


def _layer_norms(modules: list[nn.Module], where: str) -> float:
    for m in modules:
        if not isinstance(m, nn.LayerNorm) or not m.elementwise_affine or m.bias is None:
            raise UnmappableError(f"{where}: {type(m).__name__} in place of an affine LayerNorm")
    return _one({m.eps for m in modules}, "LayerNorm eps", where)


def _encoder_layer(p: str, qkv: nn.Linear | nn.MultiheadAttention, out: nn.Linear, norm1: nn.Module, norm2: nn.Module,
                   fc1: nn.Linear, fc2: nn.Linear) -> dict[str, torch.Tensor]:
    """One transformers encoder layer (CLIP's and SigLIP's name theirs alike) at prefix `p`, its fused q, k, v split."""
    weight, bias = (qkv.in_proj_weight, qkv.in_proj_bias) if isinstance(qkv, nn.MultiheadAttention) else (qkv.weight, qkv.bias)
    tensors = {f"{p}.self_attn.{n}_proj.weight": w.clone() for n, w in zip("qkv", weight.chunk(3), strict=True)}
    tensors |= {f"{p}.self_attn.{n}_proj.bias": b.clone() for n, b in zip("qkv", bias.chunk(3), strict=True)}
    for name, module in (("self_attn.out_proj", out), ("layer_norm1", norm1), ("layer_norm2", norm2), ("mlp.fc1", fc1), ("mlp.fc2", fc2)):
        tensors |= {f"{p}.{name}.weight": module.weight, f"{p}.{name}.bias": module.bias}
    return tensors


def _open_clip_layers(blocks: nn.ModuleList, prefix: str, where: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """open_clip ResidualAttentionBlocks as transformers encoder layers (CLIP and SigLIP name them alike)."""
    out, acts, heads, norms = {}, set(), set(), []
    for i, b in enumerate(blocks):
        here = f"{where}.resblocks.{i}"
        extra = {n for n, m in b.named_children() if n not in ("ln_1", "attn", "ls_1", "ln_2", "mlp", "ls_2")}
        scaled = not isinstance(b.ls_1, nn.Identity) or not isinstance(b.ls_2, nn.Identity)
        if type(b).__name__ != "ResidualAttentionBlock" or extra or scaled:
            raise UnmappableError(f"{here}: a {type(b).__name__} with {sorted(extra) or 'layer scale'}: transformers' layers have none")
        if not isinstance(b.attn, nn.MultiheadAttention) or b.attn.in_proj_bias is None:
            raise UnmappableError(f"{here}.attn: not a biased nn.MultiheadAttention")
        if [n for n, _ in b.mlp.named_children()] != ["c_fc", "gelu", "c_proj"]:
            raise UnmappableError(f"{here}.mlp: {[n for n, _ in b.mlp.named_children()]} in place of c_fc, gelu, c_proj")
        acts.add(_act(b.mlp.gelu, f"{here}.mlp"))
        heads.add(b.attn.num_heads)
        norms += [b.ln_1, b.ln_2]
        out |= _encoder_layer(f"{prefix}.{i}", b.attn, b.attn.out_proj, b.ln_1, b.ln_2, b.mlp.c_fc, b.mlp.c_proj)
    config = {"num_hidden_layers": len(blocks), "num_attention_heads": _one(heads, "heads", where),
              "hidden_act": _one(acts, "activation", where), "intermediate_size": blocks[0].mlp.c_fc.out_features}
    return out, {**config, "layer_norm_eps": _layer_norms(norms, where)}


def _text_tower(text: nn.Module, prefix: str, where: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The parts CLIP's and SigLIP's text towers share: embeddings, layers, final LayerNorm."""
    layers, config = _open_clip_layers(text.transformer.resblocks, f"{prefix}.encoder.layers", f"{where}.transformer")
    width = text.token_embedding.weight.shape[1]
    tensors = {
        f"{prefix}.embeddings.token_embedding.weight": text.token_embedding.weight,
        f"{prefix}.embeddings.position_embedding.weight": text.positional_embedding,
        f"{prefix}.final_layer_norm.weight": text.ln_final.weight, f"{prefix}.final_layer_norm.bias": text.ln_final.bias,
        **layers,
    }
    eps = _layer_norms([text.ln_final], f"{where}.ln_final")
    if eps != config["layer_norm_eps"]:
        raise UnmappableError(f"{where}.ln_final: eps {eps} differs from the layers' {config['layer_norm_eps']}")
    return tensors, {**config, "hidden_size": width, "vocab_size": text.token_embedding.num_embeddings,
                     "max_position_embeddings": text.positional_embedding.shape[0]}


def _clip(model: nn.Module, special: dict[str, int]) -> tuple[dict[str, torch.Tensor], Any]:
    from transformers import CLIPConfig

    v = model.visual
    if type(v).__name__ != "VisionTransformer":
        raise UnmappableError(f"visual: {type(v).__name__} is not a ViT: transformers' CLIPModel holds ViTs only")
    checks = {"attentional pooling": v.attn_pool is not None, f"pool_type {v.pool_type!r} (needs 'tok')": v.pool_type != "tok",
              "no ln_pre": not isinstance(v.ln_pre, nn.LayerNorm), "patch embedding bias": v.conv1.bias is not None,
              "no projection": v.proj is None,
              f"text pooling {model.text_pool_type!r} (needs 'argmax' or 'eos')": model.text_pool_type not in ("argmax", "eos"),
              "no causal mask": model.attn_mask is None, "text projection bias": not isinstance(model.text_projection, nn.Parameter)}
    bad = [what for what, fails in checks.items() if fails]
    if bad:
        raise UnmappableError(f"{'visual' if bad[0] in list(checks)[:5] else 'text'}: {bad[0]}: transformers' CLIPModel has no such part")
    vis, vcfg = _open_clip_layers(v.transformer.resblocks, "vision_model.encoder.layers", "visual.transformer")
    eps = _layer_norms([v.ln_pre, v.ln_post], "visual.ln_pre/ln_post")
    if eps != vcfg["layer_norm_eps"]:
        raise UnmappableError(f"visual: ln_pre/ln_post eps {eps} differs from the layers' {vcfg['layer_norm_eps']}")
    vis.update({
        "vision_model.embeddings.class_embedding": v.class_embedding,
        "vision_model.embeddings.patch_embedding.weight": v.conv1.weight,
        "vision_model.embeddings.position_embedding.weight": v.positional_embedding,
        "vision_model.pre_layrnorm.weight": v.ln_pre.weight, "vision_model.pre_layrnorm.bias": v.ln_pre.bias,
        "vision_model.post_layernorm.weight": v.ln_post.weight, "vision_model.post_layernorm.bias": v.ln_post.bias,
        "visual_projection.weight": v.proj.T,
    })
    txt, tcfg = _text_tower(model, "text_model", "text")
    txt["text_projection.weight"] = model.text_projection.T
    # transformers pools the first eos_token_id; open_clip the first end-of-text id ('eos') or the largest id ('argmax': CLIP's BPE
    # puts its end-of-text token last in the vocabulary)
    eos = model.text_eos_id if model.text_pool_type == "eos" else tcfg["vocab_size"] - 1
    if eos == 2:
        raise UnmappableError("text: pooled at end-of-text id 2, which transformers' CLIPTextTransformer reads as its legacy "
                              "argmax pooling (modeling_clip.py: `if self.eos_token_id == 2`)")
    tcfg.update(eos_token_id=eos, bos_token_id=eos - 1 if model.text_pool_type == "argmax" else eos, pad_token_id=0)
    vcfg.update(hidden_size=v.conv1.out_channels, image_size=v.image_size[0], patch_size=v.patch_size[0], num_channels=3)
    if v.image_size[0] != v.image_size[1] or v.patch_size[0] != v.patch_size[1]:
        raise UnmappableError(f"visual: image {v.image_size} or patch {v.patch_size} not square: CLIPVisionConfig takes one size")
    # each tower's own config holds the projection width too: CLIPVisionModelWithProjection / CLIPTextModelWithProjection
    # (diffusers, SDXL) read it there, and default to 512
    tcfg["projection_dim"] = vcfg["projection_dim"] = v.proj.shape[1]
    config = CLIPConfig(text_config=tcfg, vision_config=vcfg, projection_dim=v.proj.shape[1],
                        logit_scale_init_value=float(model.logit_scale.detach()))
    return {**vis, **txt, "logit_scale": model.logit_scale.reshape(())}, config


def _siglip(model: nn.Module, special: dict[str, int]) -> tuple[dict[str, torch.Tensor], Any]:
    from transformers import SiglipConfig

    trunk = getattr(model.visual, "trunk", None)
    if type(trunk).__name__ != "VisionTransformer" or not hasattr(trunk, "patch_embed"):
        raise UnmappableError(f"visual: {type(trunk or model.visual).__name__} is not a timm ViT: transformers' SiglipModel holds "
                              "ViTs only")
    pe, pool = trunk.patch_embed, getattr(trunk, "attn_pool", None)
    checks = {
        f"patch embedding {type(pe).__name__} (needs PatchEmbed's one Conv2d)": not isinstance(getattr(pe, "proj", None), nn.Conv2d)
        or not isinstance(getattr(pe, "norm", nn.Identity()), nn.Identity),
        "class token": trunk.cls_token is not None or trunk.num_prefix_tokens != 0,
        f"global_pool {trunk.global_pool!r} (needs 'map')": trunk.global_pool != "map" or pool is None,
        "norm_pre": not isinstance(trunk.norm_pre, nn.Identity),
        "fc_norm or head": not isinstance(trunk.fc_norm, nn.Identity) or not isinstance(trunk.head, nn.Identity)
        or any(True for _ in model.visual.head.parameters()),
    }
    bad = [what for what, fails in checks.items() if fails]
    if bad:
        raise UnmappableError(f"visual.trunk: {bad[0]}: transformers' SiglipModel has no such part")
    if pool.latent_len != 1 or not isinstance(pool.q_norm, nn.Identity) or pool.pool != "token":
        raise UnmappableError("visual.trunk.attn_pool: several latents, q/k norms or non-token pooling: SigLIP's head has none")
    vis, norms, acts, heads = {}, [trunk.norm, pool.norm], {_act(pool.mlp.act, "visual.trunk.attn_pool.mlp")}, {pool.num_heads}
    for i, b in enumerate(trunk.blocks):
        here, p = f"visual.trunk.blocks.{i}", f"vision_model.encoder.layers.{i}"
        if not all(isinstance(m, nn.Identity) for m in (b.ls1, b.ls2, b.attn.q_norm, b.attn.k_norm, b.attn.norm, b.mlp.norm)):
            raise UnmappableError(f"{here}: layer scale or q/k norms: transformers' SiglipModel has none")
        if b.attn.qkv.bias is None:
            raise UnmappableError(f"{here}.attn.qkv: no bias: transformers' SiglipModel's attention has one")
        acts.add(_act(b.mlp.act, f"{here}.mlp"))
        heads.add(b.attn.num_heads)
        norms += [b.norm1, b.norm2]
        vis |= _encoder_layer(p, b.attn.qkv, b.attn.proj, b.norm1, b.norm2, b.mlp.fc1, b.mlp.fc2)
    inner = {trunk.blocks[0].mlp.fc1.out_features, pool.mlp.fc1.out_features}
    h = "vision_model.head"
    vis.update({
        "vision_model.embeddings.patch_embedding.weight": pe.proj.weight, "vision_model.embeddings.patch_embedding.bias": pe.proj.bias,
        "vision_model.embeddings.position_embedding.weight": trunk.pos_embed[0],
        "vision_model.post_layernorm.weight": trunk.norm.weight, "vision_model.post_layernorm.bias": trunk.norm.bias,
        f"{h}.probe": pool.latent, f"{h}.attention.in_proj_weight": torch.cat([pool.q.weight, pool.kv.weight]),
        f"{h}.attention.in_proj_bias": torch.cat([pool.q.bias, pool.kv.bias]),
        f"{h}.attention.out_proj.weight": pool.proj.weight, f"{h}.attention.out_proj.bias": pool.proj.bias,
        f"{h}.layernorm.weight": pool.norm.weight, f"{h}.layernorm.bias": pool.norm.bias,
        f"{h}.mlp.fc1.weight": pool.mlp.fc1.weight, f"{h}.mlp.fc1.bias": pool.mlp.fc1.bias,
        f"{h}.mlp.fc2.weight": pool.mlp.fc2.weight, f"{h}.mlp.fc2.bias": pool.mlp.fc2.bias,
    })
    size, patch = pe.img_size, pe.patch_size
    if size[0] != size[1] or patch[0] != patch[1]:
        raise UnmappableError(f"visual: image {size} or patch {patch} not square: SiglipVisionConfig takes one size")
    vcfg = {"hidden_size": trunk.embed_dim, "intermediate_size": _one(inner, "MLP width (blocks and head)", "visual.trunk"),
            "num_hidden_layers": len(trunk.blocks), "num_attention_heads": _one(heads, "heads (blocks and head)", "visual.trunk"),
            "hidden_act": _one(acts, "activation (blocks and head)", "visual.trunk"), "layer_norm_eps": _layer_norms(norms, "visual.trunk"),
            "image_size": size[0], "patch_size": patch[0], "num_channels": pe.proj.in_channels}

    text = model.text
    checks = {f"pooling {text.pool_type!r} (needs 'last')": text.pool_type != "last", "a causal mask": text.attn_mask is not None,
              "a class embedding": text.cls_emb is not None, "a padding mask": getattr(text, "use_pad_mask", False),
              "no biased linear projection": not isinstance(text.text_projection, nn.Linear) or text.text_projection.bias is None}
    bad = [what for what, fails in checks.items() if fails]
    if bad:
        raise UnmappableError(f"text: {bad[0]}: transformers' SiglipModel's text tower has no such part")
    txt, tcfg = _text_tower(text, "text_model", "text")
    txt.update({"text_model.head.weight": text.text_projection.weight, "text_model.head.bias": text.text_projection.bias})
    tcfg["projection_size"] = text.text_projection.out_features
    if tcfg["projection_size"] != vcfg["hidden_size"]:
        raise UnmappableError(f"text: projects to {tcfg['projection_size']}, the image width is {vcfg['hidden_size']}: "
                              "SiglipModel compares the attention-pool output unprojected")
    tcfg.update({"pad_token_id": text.pad_id, "bos_token_id": text.eos_id, "eos_token_id": text.eos_id, **special})
    config = SiglipConfig(text_config=tcfg, vision_config=vcfg)
    return {**vis, **txt, "logit_scale": model.logit_scale.reshape(1), "logit_bias": model.logit_bias.reshape(1)}, config


def family(model: nn.Module) -> str:
    """"clip" or "siglip": which transformers model class represents this open_clip model, else UnmappableError."""
    if getattr(model, "logit_bias", None) is not None and hasattr(model, "text"):
        return "siglip"
    if type(model).__name__ == "CLIP" and getattr(model, "logit_bias", None) is None:
        return "clip"
    raise UnmappableError(f"{type(model).__name__}: neither a CLIP (ViT, causal text tower) nor a SigLIP (timm ViT with a 'map' "
                          "head, sigmoid logit bias) model: transformers' CLIPModel and SiglipModel represent no other")


def convert(model: nn.Module, special: dict[str, int] | None = None) -> tuple[nn.Module, str]:
    """The transformers model holding `model`'s weights (fp32, eval mode), and its family. `special`: the tokenizer's
    pad, bos and eos ids for the text config (SigLIP's; CLIP's follow from open_clip's end-of-text pooling)."""
    from transformers import CLIPModel, SiglipModel

    kind = family(model)
    with torch.no_grad():
        tensors, config = _clip(model, {}) if kind == "clip" else _siglip(model, special or {})
        hf = (CLIPModel if kind == "clip" else SiglipModel)(config)
        hf.load_state_dict({k: t.detach().float().cpu().contiguous().clone() for k, t in tensors.items()}, strict=True)
    return hf.eval(), kind


def image_processor(preprocess_cfg: dict[str, Any], kind: str):
    """transformers' image processor doing what open_clip's evaluation preprocessing does (PIL backend: exact)."""
    from transformers import CLIPImageProcessor, SiglipImageProcessor

    size = preprocess_cfg["size"]
    height, width = (size, size) if isinstance(size, int) else size
    resample = _RESAMPLE.get(preprocess_cfg.get("interpolation", "bicubic"))
    mode = preprocess_cfg.get("resize_mode", "shortest")
    if resample is None or mode not in ("shortest", "squash") or (mode == "shortest" and height != width):
        raise UnmappableError(f"preprocessing: resize_mode {mode!r} with interpolation {preprocess_cfg.get('interpolation')!r} "
                              "has no transformers image processor (shortest side and centre crop, or squash)")
    common = {"resample": resample, "image_mean": list(preprocess_cfg["mean"]), "image_std": list(preprocess_cfg["std"]),
              "do_convert_rgb": True}
    if mode == "squash" and kind == "siglip":
        return SiglipImageProcessor(size={"height": height, "width": width}, **common)
    if mode == "squash":
        return CLIPImageProcessor(size={"height": height, "width": width}, do_center_crop=False, **common)
    return CLIPImageProcessor(size={"shortest_edge": height}, crop_size={"height": height, "width": width}, do_center_crop=True, **common)


def clip_bpe() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The CLIP BPE open_clip ships as transformers reads it: the vocabulary (OpenAI's ids) and the merges."""
    with gzip.open(default_bpe()) as f:
        lines = f.read().decode("utf-8").split("\n")
    merges = [tuple(line.split()) for line in lines[1 : 49152 - 256 - 2 + 1]]  # as open_clip.tokenizer.SimpleTokenizer
    symbols = list(bytes_to_unicode().values())
    vocab = [*symbols, *(s + "</w>" for s in symbols), *("".join(m) for m in merges), "<|startoftext|>", "<|endoftext|>"]
    return {t: i for i, t in enumerate(vocab)}, merges


def clip_bpe_tokenizer(context_length: int):
    """transformers' CLIPTokenizer over the CLIP BPE open_clip ships (OpenAI's vocabulary, the same ids)."""
    from transformers import CLIPTokenizer

    vocab, merges = clip_bpe()
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=context_length)


def tokenizer(open_clip_tokenizer: Any, kind: str, context_length: int) -> tuple[Any | None, list[str]]:
    """transformers' counterpart of the model's open_clip tokenizer, or None, and what a user must know about it."""
    try:
        inner = open_clip_tokenizer._build() if hasattr(open_clip_tokenizer, "_build") else open_clip_tokenizer
    except DownloadError as e:
        return None, [f"tokenizer: not written: {e}"]
    if isinstance(inner, SimpleTokenizer):
        if kind == "siglip":  # pooled at the last position: padding must be open_clip's id 0, which is '!' to transformers
            return None, ["tokenizer: the CLIP BPE padded with id 0 and pooled at the last position has no transformers "
                          f"counterpart: tokenize with open_clip.SimpleTokenizer(context_length={context_length})"]
        return clip_bpe_tokenizer(context_length), [
            "tokenizer: transformers' CLIPTokenizer skips open_clip's ftfy and HTML-unescape cleaning: captions with HTML "
            "entities or broken Unicode tokenize differently (all 25,014 COCO val2017 captions tokenize the same)"]
    if isinstance(inner, HFTokenizer):
        hf = inner.tokenizer
        hf.model_max_length = context_length
        notes = []
        if kind == "siglip":
            hf.model_input_names = hf.init_kwargs["model_input_names"] = ["input_ids"]  # SigLIP attends to padding, as open_clip
            notes.append(f"tokenizer: call it with padding='max_length', max_length={context_length}, as SigLIP was trained")
            notes.append("tokenizer: transformers 4.x's SiglipProcessor asks for a SentencePiece tokenizer: there, load "
                         "AutoTokenizer and AutoImageProcessor each on its own (5.x's AutoProcessor takes this one)")
        clean = getattr(inner.clean_fn, "__name__", "")
        if "canonical" in clean:
            notes.append("tokenizer: open_clip lower-cases and strips punctuation first (clean='canonicalize'); transformers' "
                         "tokenizer does not: pass open_clip.tokenizer.canonicalize_text(caption)")
        return hf, notes
    return None, [f"tokenizer: {type(inner).__name__} has no transformers counterpart written here"]


def agreement(model: nn.Module, hf: nn.Module, kind: str) -> tuple[float, float]:
    """Max |difference| of normalised image and text embeddings, open_clip against transformers, on a seeded probe:
    noise images and random token ids (a caption ending early in padding, one filling the context), no tokenizer needed."""
    v = model.visual
    size = v.image_size if hasattr(v, "image_size") else v.trunk.patch_embed.img_size
    rng = torch.Generator().manual_seed(0)
    image = torch.randn(2, 3, *size, generator=rng)
    vocab, context = hf.config.text_config.vocab_size, hf.config.text_config.max_position_embeddings
    tokens = torch.randint(0, vocab - 1, (2, context), generator=rng)  # below CLIP's end-of-text id, the largest
    if kind == "clip":  # where CLIP pools
        eos = hf.config.text_config.eos_token_id
        tokens[0, context // 3 :], tokens[1, -1] = 0, eos
        tokens[0, context // 3] = eos
    with torch.no_grad():
        ours_i, ours_t = model.encode_image(image, normalize=True), model.encode_text(tokens, normalize=True)
        theirs = hf.get_image_features(pixel_values=image), hf.get_text_features(input_ids=tokens)
        theirs = [getattr(t, "pooler_output", t) for t in theirs]  # transformers 5 returns outputs, 4 returned tensors
        theirs_i, theirs_t = (torch.nn.functional.normalize(t, dim=-1) for t in theirs)
    return float((ours_i - theirs_i).abs().max()), float((ours_t - theirs_t).abs().max())


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Hide transformers' progress bars and its warning about default SigLIP token ids, which saving a config
    raises by building a default one to compare with."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _readable_by_older_transformers(folder: Path, kind: str) -> None:
    """Tokenizer files that transformers 4.x reads too. CLIP's: `vocab.json` and `merges.txt` (every version builds its
    tokenizer from them) and no `tokenizer.json`, whose newer serialisation 4.x's tokenizers cannot parse ("untagged enum
    ModelWrapper"). SigLIP's: the class every version has (`PreTrainedTokenizerFast`, where 5.x writes its new
    `TokenizersBackend`), and none of the loading arguments 5.x records. Every version builds the processor from
    `preprocessor_config.json` and the tokenizer."""
    (folder / "processor_config.json").unlink(missing_ok=True)  # 5.x's nesting of preprocessor_config.json, which 4.x
    config_file = folder / "tokenizer_config.json"              # passes on as a second image_processor
    config = json.loads(config_file.read_text(encoding="utf-8"))
    for key in ("is_local", "local_files_only", "backend"):
        config.pop(key, None)
    if kind == "clip":
        vocab, merges = clip_bpe()
        (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
        (folder / "tokenizer.json").unlink(missing_ok=True)
    elif config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_file.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def save(model: nn.Module, spec: dict[str, Any], open_clip_tokenizer: Any, folder: Path) -> tuple[str, list[str]]:
    """Write model, image processor and (where one exists) tokenizer into `folder`; returns the family and the notes."""
    from transformers import CLIPProcessor, SiglipProcessor

    model = model.float().eval()
    kind = family(model)
    tok, notes = tokenizer(open_clip_tokenizer, kind, spec["tokenizer"]["context_length"])
    special = {f"{k}_token_id": getattr(tok, f"{k}_token_id", None) for k in ("pad", "bos", "eos")}
    hf, kind = convert(model, {k: v for k, v in special.items() if v is not None})
    d_image, d_text = agreement(model, hf, kind)
    if max(d_image, d_text) > AGREEMENT_TOLERANCE:
        raise UnmappableError(f"the converted {kind} model's embeddings differ from open_clip's (image {d_image:.2e}, text "
                              f"{d_text:.2e}): some part of this architecture maps to nothing in transformers; not exported")
    images = image_processor(spec["preprocess_cfg"], kind)
    if spec["preprocess_cfg"].get("resize_mode", "shortest") == "shortest":
        notes.append("image processor: transformers floors the centre crop's offset where open_clip (torchvision) rounds half to "
                     "even, so when the resized long side exceeds the crop by 3 mod 4 pixels the crop sits one pixel over (129 of "
                     "1,000 Flickr8k photos at 224 px); every other pixel value equals open_clip's with backend='pil'")
    with _quiet_transformers():
        hf.save_pretrained(folder)
        images.save_pretrained(folder)  # preprocessor_config.json: what CLIPImageProcessor.from_pretrained reads in any version
        if tok is not None:
            (CLIPProcessor if kind == "clip" else SiglipProcessor)(image_processor=images, tokenizer=tok).save_pretrained(folder)
            _readable_by_older_transformers(folder, kind)
    notes.append(f"checked: image and text embeddings equal open_clip's within {max(d_image, d_text):.1e} (fp32)")
    return kind, notes
