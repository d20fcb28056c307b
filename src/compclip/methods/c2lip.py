"""C2LIP: noun-phrase concept losses, no hard negatives, inference unchanged (docs/methods.md §1).

L = L_siglip + λ_npc L_npc + λ_xac L_xac. L_npc contrasts images with their captions' noun
phrases (a multi-positive SigLIP loss); L_xac first pools each image's visual tokens by
cross-attention with the concept (through the attention-pool head's value path, no new
parameters), so the binding signal reaches the representation before the global pool.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from ..errors import UsageError
from ..gather import GatheredLoss
from ..models.tokens import encode_short_texts, visual_token_embeddings
from .base import LossPart, Method, Output, option, owned, register_method, require_concept_fields, sigmoid_pairs_loss, text_width_of
from .siglip import SigLIPLoss, SigLIPPart

__all__ = [
    "C2LIPLoss",
    "ConceptLoss",
    "attribute_swaps",
    "concept_attention",
    "concept_inputs",
    "concept_token_spans",
    "modified_phrases",
    "npc_loss",
    "span_embeddings",
    "visual_token_embeddings",
    "xac_loss",
]

XAC_CHUNK_ELEMENTS = 1 << 24  # B × chunk × M attention scores held at once (64 MiB in fp32)


def npc_loss(
    image_emb: torch.Tensor,
    concept_emb: torch.Tensor,
    concept_image: torch.Tensor,
    logit_scale: torch.Tensor | float,
    logit_bias: torch.Tensor | float | None,
    *,
    image_offset: int = 0,
    n_concepts: int | None = None,
) -> torch.Tensor:
    """Multi-positive SigLIP loss between images and concepts (L2-normalised embeddings).

    −(1/𝒦) Σ_i Σ_j log σ(z_ij (τ v_i·c_j + b)), z_ij = +1 iff `concept_image[j] == i`. `logit_scale`
    is τ as in open_clip's outputs (already exponentiated). Rows are the images
    `image_offset + arange(B)`; `n_concepts` (default: all given) is 𝒦.
    """
    n = concept_emb.shape[0] if n_concepts is None else n_concepts
    if n == 0:
        return image_emb.sum() * 0.0
    logits = logit_scale * image_emb @ concept_emb.T
    if logit_bias is not None:
        logits = logits + logit_bias
    rows = torch.arange(image_emb.shape[0], device=image_emb.device) + image_offset
    return sigmoid_pairs_loss(logits, rows[:, None] == concept_image[None, :], n)


def _xac_logits(tokens: torch.Tensor, gram: torch.Tensor, concepts: torch.Tensor, temperature: float) -> torch.Tensor:
    """cos(v̂_i(c_j), c_j) for every image i and concept j of a chunk, without forming v̂.

    With raw_m = t_m·c and a = softmax(raw/t), v̂·c = Σ_m a_m raw_m and ‖v̂‖² = aᵀ G a for the
    token Gram matrix G: B×K×M work instead of B×K×D, and one GEMM instead of a loop.
    """
    raw = torch.einsum("bmd,kd->bkm", tokens, concepts)
    attn = (raw / temperature).softmax(dim=-1)
    dot = (attn * raw).sum(-1)
    sq_norm = (torch.bmm(attn, gram) * attn).sum(-1)
    return dot / sq_norm.clamp_min(1e-12).sqrt()


def xac_loss(
    tokens: torch.Tensor,
    concept_emb: torch.Tensor,
    concept_image: torch.Tensor,
    logit_scale: torch.Tensor | float,
    logit_bias: torch.Tensor | float | None,
    temperature: float | None = None,
    *,
    image_offset: int = 0,
    n_concepts: int | None = None,
    chunk_elements: int = XAC_CHUNK_ELEMENTS,
) -> torch.Tensor:
    """Cross-attention concept loss: L_npc with v_i replaced by v̂_i(c_j).

    The attention of image i for concept j is `softmax(tokens[i] @ c_j / temperature)` over the
    M tokens (`None`: √D); v̂_i(c_j) = Σ_m attn_m tokens[i, m], L2-normalised before its dot
    product with c_j. Every image attends with every concept (B×𝒦 attentions), in chunks of
    concepts recomputed in the backward pass, so memory stays bounded.
    """
    n = concept_emb.shape[0] if n_concepts is None else n_concepts
    if concept_emb.shape[0] == 0 or n == 0:
        return tokens.sum() * 0.0
    B, M, D = tokens.shape
    t = math.sqrt(D) if temperature is None else temperature
    gram = torch.bmm(tokens, tokens.transpose(1, 2))
    rows = torch.arange(B, device=tokens.device) + image_offset
    chunk = max(1, chunk_elements // (B * M))
    total = tokens.new_zeros(())
    for start in range(0, concept_emb.shape[0], chunk):
        c = concept_emb[start : start + chunk]
        positive = rows[:, None] == concept_image[None, start : start + chunk]

        def term(tokens, gram, c, positive=positive):
            logits = logit_scale * _xac_logits(tokens, gram, c, t)
            if logit_bias is not None:
                logits = logits + logit_bias
            return sigmoid_pairs_loss(logits, positive, 1)

        if torch.is_grad_enabled() and chunk < concept_emb.shape[0]:
            total = total + checkpoint(term, tokens, gram, c, use_reentrant=False)
        else:
            total = total + term(tokens, gram, c)
    return total / n


@torch.no_grad()
def concept_attention(model, tokenizer, images: torch.Tensor, concept: str, temperature: float | None = None) -> torch.Tensor:
    """The cross-attention of each image's visual tokens for a concept, as xac computes it: (B, M).

    The concept is encoded as its own text (there is no caption at inference time).
    """
    _, tokens = visual_token_embeddings(model, images)
    c = F.normalize(model.encode_text(tokenizer([concept]).to(images.device)), dim=-1)[0]
    t = math.sqrt(tokens.shape[-1]) if temperature is None else temperature
    return (tokens @ c / t).softmax(dim=-1)


def _content_ids(tokenizer, text: str) -> list[int]:
    """Token ids of `text` without special tokens, after the cleaning the tokenizer applies to a caption (CLIP's
    lower-casing, SigLIP's canonicalisation: lower case and punctuation removed), so they are the caption's ids."""
    import open_clip
    from open_clip.tokenizer import basic_clean, canonicalize_text

    from ..models.factory import LazyTokenizer

    inner = tokenizer._build() if isinstance(tokenizer, LazyTokenizer) else tokenizer
    if isinstance(inner, open_clip.SimpleTokenizer):
        return inner.encode(text)  # cleans as __call__ does
    if hasattr(inner, "tokenizer"):  # open_clip's HFTokenizer and SigLipTokenizer wrap a HF tokenizer
        clean = getattr(inner, "clean_fn", None) or (lambda t: canonicalize_text(basic_clean(t)))  # SigLipTokenizer's own
        return inner.tokenizer(clean(text), add_special_tokens=False)["input_ids"]
    raise UsageError(f"span pooling does not know how to tokenize with {type(inner).__name__}")


def concept_token_spans(
    tokenizer, caption: str, phrases: Sequence[tuple[str, int, int]], tokens: Sequence[int]
) -> list[tuple[int, int] | None]:
    """Token positions `[start, end)` in `tokens` (the caption as the model sees it) of each phrase.

    A phrase's positions come from tokenizing the caption up to its character start and end;
    a phrase cut off by the context length, or whose boundary does not fall between tokens,
    gets None and is dropped.
    """
    content = _content_ids(tokenizer, caption)
    tokens = list(tokens)
    offset = next((i for i in range(len(tokens)) if tokens[i : i + 1] == content[:1]), None) if content else None
    if offset is None:
        return [None] * len(phrases)
    kept = 0  # content tokens that survived truncation
    while kept < len(content) and offset + kept < len(tokens) and tokens[offset + kept] == content[kept]:
        kept += 1
    spans: list[tuple[int, int] | None] = []
    for _, start, end in phrases:
        before = _content_ids(tokenizer, caption[:start].rstrip())
        through = _content_ids(tokenizer, caption[:end])
        aligned = content[: len(through)] == through and content[: len(before)] == before
        if not aligned or len(through) > kept or len(through) <= len(before):
            spans.append(None)
        else:
            spans.append((offset + len(before), offset + len(through)))
    return spans


def span_embeddings(states: torch.Tensor, concept_image: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
    """Mean of `states[concept_image[k], start_k:end_k]` for every concept k, vectorised with a cumulative sum."""
    csum = F.pad(states.cumsum(dim=1), (0, 0, 1, 0))
    start, end = spans[:, 0], spans[:, 1]
    total = csum[concept_image, end] - csum[concept_image, start]
    return total / (end - start).unsqueeze(-1).to(states.dtype)


XAC_ATTENTION = ("scaled", "cosine")
NPC_NEGATIVES = ("none", "swap_attributes")
CONCEPT_PHRASES = ("all", "modified")
MODIFIER_TAGS = frozenset(("ADJ", "NOUN", "PROPN", "VERB"))  # "a red square", "a tennis ball", "a parked car"
DETERMINERS = frozenset(("a", "an", "the", "this", "that", "these", "those", "some", "one", "two", "three", "four", "another",
                         "its", "his", "her", "their"))


def attribute_swaps(phrases: Sequence[str]) -> list[tuple[int, str]]:
    """For `npc_negatives=swap_attributes`: each phrase with the modifiers of another phrase of the same caption (the
    words between its determiner and its head noun, the last word): "a red square" and "a blue circle" give (0, "a blue
    square") and (1, "a red circle"). Phrases without modifiers, with the same head or the same modifiers give none; a
    swap that is one of the caption's own phrases is dropped. Returns (index of the phrase, negative text)."""
    parts = []
    for phrase in phrases:
        words = phrase.split()
        det = words[:1] if len(words) > 1 and words[0].lower() in DETERMINERS else []
        parts.append((det, words[len(det):-1], words[-1:]))
    own = {p.lower() for p in phrases}
    swaps = []
    for i, (det, mods, head) in enumerate(parts):
        for j, (_, other, other_head) in enumerate(parts):
            if i == j or not mods or not other or [w.lower() for w in mods] == [w.lower() for w in other]:
                continue
            if [w.lower() for w in head] == [w.lower() for w in other_head]:
                continue
            text = " ".join(det + other + head)
            if text.lower() not in own:
                swaps.append((i, text))
    return list(dict.fromkeys(swaps))


def modified_phrases(phrases: Sequence[tuple[str, int, int]], pos: Sequence[tuple[str, int, int, str]]) -> list[tuple[str, int, int]]:
    """For `concept_phrases=modified`: the phrases whose head (their last token) has a modifier before it, a token tagged
    ADJ, NOUN, PROPN or VERB ("a red square", "a tennis ball", "a parked car"; not "the picture", "two dogs"), from the
    record's POS tags over the same characters."""
    kept = []
    for phrase in phrases:
        _, start, end = phrase
        tags = [tag for _, a, b, tag in pos if a >= start and b <= end]
        if any(tag in MODIFIER_TAGS for tag in tags[:-1]):
            kept.append(phrase)
    return kept


def swap_negative_loss(image_emb: torch.Tensor, negatives: torch.Tensor, owners: torch.Tensor, logit_scale, logit_bias,
                       n_concepts: int) -> torch.Tensor:
    """The attribute-swap negatives' part of L_npc: −Σ_k log σ(−(τ v_{o_k}·n_k + b)) / 𝒦, each negative n_k against its
    own image o_k alone (a local row), over the same 𝒦 concepts L_npc divides by."""
    if negatives.shape[0] == 0 or n_concepts == 0:
        return image_emb.sum() * 0.0
    logits = logit_scale * (image_emb[owners] * negatives).sum(-1)
    if logit_bias is not None:
        logits = logits + logit_bias
    return -F.logsigmoid(-logits).sum() / n_concepts


@dataclass(frozen=True)
class Options:
    concept_mode: str = option("span", "span (pool the caption's own token states over the phrase, the paper's) or separate "
                                       "(encode each phrase as its own text, the released code's)")
    lambda_npc: float = option(1.0, "weight of the noun-phrase concept loss L_npc")
    lambda_xac: float = option(0.01, "weight of the cross-attention concept loss L_xac")
    xac_attention: str = option("cosine", "cosine: attend with L2-normalised tokens at temperature 1 (the released code's "
                                          "func_attention; the paper gives none); scaled: with the raw visual tokens at √D (ours)")
    xac_temperature: float | None = option(None, "cross-attention temperature; none: √D (scaled) or 1 (cosine)")
    caption_concept: bool = option(False, "a caption without a noun phrase is its own concept (the released code's data.py); "
                                          "false: it adds none (the paper)")
    npc_negatives: str = option("none", "none (the paper: other images' concepts are L_npc's only negatives) or swap_attributes "
                                        "(ours): each phrase with the modifiers of another phrase of its caption ('a blue "
                                        "square' for an image of a red square and a blue circle) is a negative of its own image")
    concept_phrases: str = option("all", "all (the paper: every noun phrase is a concept) or modified (ours): only phrases whose "
                                         "head noun has a modifier ('a red square', not 'the picture'); needs the store's POS tags")


class ConceptLoss(GatheredLoss):
    """C2LIP's concept terms over the batch of every rank: `{"npc": λ_npc L_npc, "xac": λ_xac L_xac}`, each the full
    batch's value on every rank (`compclip.gather`).

    Inputs are this rank's: `image_features` (B, D) and `visual_tokens` (B, M, D) of its images; `concept_features` (K, D),
    each concept's L2-normalised embedding, and `concept_image` (K,), the local index of the image whose caption it
    comes from (`concept_inputs` computes them from a model); `swap_features` and `swap_image` likewise for the
    attribute-swap negatives of `npc_negatives=swap_attributes` (ours), each read against its own image only.
    `xac_attention` "cosine" attends with L2-normalised tokens (the released code's), "scaled" with the raw ones;
    `xac_temperature` None: 1 (cosine) or √D (scaled).
    """

    def __init__(self, lambda_npc: float = 1.0, lambda_xac: float = 0.01, xac_attention: str = "cosine",
                 xac_temperature: float | None = None, rank: int = 0, world_size: int = 1, group=None):
        super().__init__(rank, world_size, group)
        if xac_attention not in XAC_ATTENTION:
            raise UsageError(f"xac_attention must be one of {', '.join(XAC_ATTENTION)}, not {xac_attention!r}")
        self.lambda_npc, self.lambda_xac, self.cosine = lambda_npc, lambda_xac, xac_attention == "cosine"
        self.temperature = xac_temperature if xac_temperature is not None else 1.0 if self.cosine else None

    def forward(self, image_features, concept_features, visual_tokens, concept_image, logit_scale, logit_bias,
                swap_features=None, swap_image=None) -> dict[str, torch.Tensor]:
        self.check_inputs(image_features, per_image={"visual_tokens": visual_tokens}, concept_features=concept_features,
                          concept_image=concept_image, logit_scale=logit_scale, logit_bias=logit_bias, swap_features=swap_features,
                          swap_image=swap_image)
        counts = self.gather.counts(image_features)
        concepts, owners = self.gather.owned(concept_features, concept_image, counts)
        common = {"image_offset": self.gather.first(counts), "n_concepts": concepts.shape[0]}
        tokens = F.normalize(visual_tokens, dim=-1) if self.cosine else visual_tokens
        npc = npc_loss(image_features, concepts, owners, logit_scale, logit_bias, **common)
        if swap_features is not None:
            npc = npc + swap_negative_loss(image_features, swap_features, swap_image, logit_scale, logit_bias, common["n_concepts"])
        xac = xac_loss(tokens, concepts, owners, logit_scale, logit_bias, self.temperature, **common)
        return {"npc": self.gather.total(self.lambda_npc * npc), "xac": self.gather.total(self.lambda_xac * xac)}


class C2LIPLoss(GatheredLoss):
    """C2LIP's whole loss, L_siglip + λ_npc L_npc + λ_xac L_xac, in open_clip's shape: `C2LIPLoss(rank=, world_size=)(
    image_features, text_features, concept_features, visual_tokens, concept_image, logit_scale, logit_bias)`; with
    `output_dict=True` the three terms by name, as open_clip's `CoCaLoss`. Options as `ConceptLoss`'s."""

    def __init__(self, lambda_npc: float = 1.0, lambda_xac: float = 0.01, xac_attention: str = "cosine",
                 xac_temperature: float | None = None, rank: int = 0, world_size: int = 1, group=None):
        super().__init__(rank, world_size, group)
        self.siglip = SigLIPLoss(rank, world_size, group)
        self.concepts = ConceptLoss(lambda_npc, lambda_xac, xac_attention, xac_temperature, rank, world_size, group)
        self.siglip.label = self.concepts.label = type(self).__name__  # a user called C2LIPLoss: its errors say so

    def forward(self, image_features, text_features, concept_features, visual_tokens, concept_image, logit_scale, logit_bias,
                swap_features=None, swap_image=None, output_dict: bool = False):
        terms = {"siglip": self.siglip(image_features, text_features, logit_scale, logit_bias),
                 **self.concepts(image_features, concept_features, visual_tokens, concept_image, logit_scale, logit_bias,
                                 swap_features, swap_image)}
        return terms if output_dict else sum(terms.values())


def concept_inputs(model, tokenizer, images: torch.Tensor, captions: Sequence[str],
                   phrases: Sequence[Sequence[tuple[str, int, int]]], options: Options = Options()) -> dict[str, torch.Tensor]:
    """`C2LIPLoss`'s inputs from an open_clip model with gradients, as `compclip train` computes them: the images'
    features and visual tokens, the captions' features, and each noun phrase's embedding pooled over its span of the
    caption's token states (or encoded on its own, `concept_mode=separate`) with the index of its image. `phrases[i]`:
    caption i's noun phrases as (text, start, end) characters, as spaCy's `noun_chunks` give them
    (`compclip.concepts.extract` makes them); a phrase cut off by the context length is dropped."""
    method = Method("c2lip", [SigLIPPart(), C2LIPPart(options)], concepts={})
    samples = [{"image": image, "caption": caption, "concepts": {"noun_phrases": [tuple(p) for p in found]}}
               for image, caption, found in zip(images, captions, phrases, strict=True)]
    batch = method.collate(samples, tokenizer)
    device = images.device
    batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    out = method.outputs(model, batch)
    keys = ("image_features", "text_features", "concept_features", "visual_tokens", "concept_image", "logit_scale", "logit_bias")
    return {k: out[k] for k in keys} | ({"swap_features": out["swap_features"], "swap_image": out["swap_image"]}
                                        if "swap_features" in out else {})


class C2LIPPart(LossPart):
    """λ_npc L_npc + λ_xac L_xac over the batch's noun-phrase concepts.

    Each caption's noun phrases come with the batch (`batch["concepts"]`, from the method's store); `mode` is "span"
    (pool the caption's own token states over the phrase, the paper's) or "separate" (encode each phrase as its own
    text, the released code's).
    `xac_attention` "cosine" (default) attends with L2-normalised tokens at temperature 1 (the released code's),
    "scaled" with the raw tokens at √D (ours); `caption_concept` makes a caption without a noun phrase its own concept.
    """

    name = "c2lip"
    needs = frozenset({"visual_tokens", "text_states"})
    # every image meets every concept of the global batch
    outputs: ClassVar[Mapping[str, Output]] = {"concept_features": owned("concept_image"),
                                               "swap_features": owned("swap_image")}
    uses_concepts = True
    token_fields = ("concept_text", "swap_text")
    uses_logit_bias = True

    def __init__(self, options: Options = Options()):
        super().__init__()
        o = options
        if o.concept_mode not in ("span", "separate"):
            raise UsageError(f"concept mode must be 'span' or 'separate', not {o.concept_mode!r}")
        if o.npc_negatives not in NPC_NEGATIVES:
            raise UsageError(f"npc_negatives must be one of {', '.join(NPC_NEGATIVES)}, not {o.npc_negatives!r}")
        if o.concept_phrases not in CONCEPT_PHRASES:
            raise UsageError(f"concept_phrases must be one of {', '.join(CONCEPT_PHRASES)}, not {o.concept_phrases!r}")
        self.only_modified = o.concept_phrases == "modified"
        self.swap_negatives = o.npc_negatives == "swap_attributes"
        self.mode, self.xac_attention, self.caption_concept = o.concept_mode, o.xac_attention, o.caption_concept
        self.loss = ConceptLoss(o.lambda_npc, o.lambda_xac, o.xac_attention, o.xac_temperature)
        if o.concept_mode == "separate":
            self.needs = frozenset({"visual_tokens"})

    @property
    def lambda_npc(self) -> float:
        return self.loss.lambda_npc

    @property
    def lambda_xac(self) -> float:
        return self.loss.lambda_xac

    def prepare(self, batch, samples, tokenizer):
        images, spans, texts, covered = [], [], [], []
        swaps, swap_images = [], []
        for i, (caption, tokens, record) in enumerate(zip(batch["caption"], batch["text"].tolist(), batch["concepts"], strict=True)):
            phrases = list(record["noun_phrases"]) if record else []
            if self.only_modified and phrases:
                if "pos" not in record:
                    raise UsageError(f"concept_phrases=modified reads POS tags, and the concept record of {caption!r} has none: "
                                     "build the store with `compclip concepts --what noun-phrases,pos`")
                phrases = modified_phrases(phrases, record["pos"])
            if self.swap_negatives:
                found_swaps = [text for _, text in attribute_swaps([p[0] for p in phrases])]
                swaps += found_swaps
                swap_images += [i] * len(found_swaps)
            if not phrases and self.caption_concept:
                phrases = [(caption, 0, len(caption))]
            if self.mode == "separate":
                texts += [p[0] for p in phrases]
                images += [i] * len(phrases)
                covered.append(bool(phrases))
                continue
            found = [span for span in concept_token_spans(tokenizer, caption, phrases, tokens) if span is not None]
            images += [i] * len(found)
            spans += found
            covered.append(bool(found))
        batch["covered"] = covered  # captions that gave a concept (found in the store and, as spans, in the tokens)
        if self.swap_negatives:
            batch["swap_text"] = tokenizer(swaps) if swaps else batch["text"][:0]
            batch["swap_image"] = torch.tensor(swap_images, dtype=torch.long)
        batch["concept_image"] = torch.tensor(images, dtype=torch.long)
        if self.mode == "span":
            batch["concept_span"] = torch.tensor(spans, dtype=torch.long).reshape(-1, 2)
        else:
            batch["concept_text"] = tokenizer(texts) if texts else batch["text"][:0]

    def extend(self, model, batch, out):
        if self.mode == "span":
            pooled = span_embeddings(out["text_states"], batch["concept_image"], batch["concept_span"])
            concepts = out["text_project"](pooled)
        else:
            concepts = encode_short_texts(model, batch["concept_text"], text_width_of(batch, "concept_text"))
        out["concept_features"] = F.normalize(concepts, dim=-1)
        out["concept_image"] = batch["concept_image"]
        if self.swap_negatives:
            out["swap_features"] = F.normalize(encode_short_texts(model, batch["swap_text"], text_width_of(batch, "swap_text")), dim=-1)
            out["swap_image"] = batch["swap_image"]

    def forward(self, out):
        swaps = (out["swap_features"], out["swap_image"]) if self.swap_negatives else (None, None)
        return self.loss(out["image_features"], out["concept_features"], out["visual_tokens"], out["concept_image"],
                         out["logit_scale"], out["logit_bias"], *swaps)


def build(options: Options, *, concepts=None, seed: int = 0) -> list[LossPart]:
    if options.concept_phrases == "modified":
        require_concept_fields(concepts, ("noun_phrases", "pos"), "c2lip with concept_phrases=modified")
    return [SigLIPPart(), C2LIPPart(options)]


register_method("c2lip", build, Options, ("noun_phrases",))
