"""OC-CLIP (Assouel et al.): scene-graph nodes bind to patch tokens, scored by a structured similarity.

A caption's scene graph (the concept store's `graph`: noun-phrase nodes, (relation, subject,
object) edges) is encoded by the model's own text tower, each node and relation as a short text.
A binding module owned by the method turns node queries into slots over the image's patch tokens
by inverted cross-attention (queries compete for patches), and scores the image against the graph:

    S(x, G) = (α Σ_i cos(n_i, s_i) + β Σ_p cos(r_p, f_s([r_p, s_subj]) + f_o([r_p, s_obj]))) / (α N + β P)

L_itc is the symmetric InfoNCE over τ·S(x_j, G_i) for every image-graph pair of the batch;
L_rel = −log softmax over {G, Ḡ, G̃} of τ·S(x, ·), Ḡ with one relation's subject and object
swapped and G̃ with that relation's ends drawn at random from the graph's nodes; L = L_itc + L_rel,
each summed over the batch as the paper writes them (divided by one shared count). Spec:
`docs/methods.md` §4; the paper released no code, so every open choice is ours and an option.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UsageError
from ..gather import GatheredLoss
from ..models.tokens import check_layer, encode_short_texts, visual_token_embeddings
from ..scoring import DualEncoderScorer, Scorer
from ..text import caption_rng
from .base import LossPart, Output, option, owned, register_method, text_width_of

ENDS = 6  # per relation: subject, object; swapped subject, object (Ḡ); random subject, object (G̃)


class BindingModule(nn.Module):
    """Inverted cross-attention from node queries to patch tokens, and the structured similarity."""

    def __init__(self, dim: int, default_queries: int):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        # Layer norms before the projections, as slot attention has: node and token embeddings are unit or
        # smaller vectors, whose logits start near 0.03 and stay there, so every slot would be the image mean.
        # The nodes' norm has no bias: one shared shift of every node query moves a patch's logits alike for all
        # of them, which the softmax over queries nearly cancels, so its gradient is float noise.
        self.norm_queries, self.norm_tokens = nn.LayerNorm(dim, bias=False), nn.LayerNorm(dim)
        # learned default queries, joined after the projection: Q' = [W_q N; Q_default] (the paper's)
        self.defaults = nn.Parameter(torch.randn(default_queries, dim))
        self.f_s = nn.Sequential(nn.Linear(2 * dim, dim), nn.GELU(), nn.Linear(dim, dim))
        self.f_o = nn.Sequential(nn.Linear(2 * dim, dim), nn.GELU(), nn.Linear(dim, dim))
        self.log_alpha, self.log_beta = nn.Parameter(torch.zeros(())), nn.Parameter(torch.zeros(()))

    def slots(self, tokens: torch.Tensor, nodes: torch.Tensor, node_mask: torch.Tensor, own: bool = False) -> torch.Tensor:
        """Slots (B, G, N, D) of every image's tokens (B, P, D) for every graph's nodes (G, N, D); with `own`,
        only image i with graph i, as (1, B, N, D): each slot the attention-weighted mean of the values (`attention`),
        the weights renormalised over patches, as slot attention does (ours). They are renormalised before the values
        are weighted: a division of (B, G, N, P) weights, not of (B, G, N, D) slots (196 patches against 512 dimensions
        at ViT-B-16), one tensor fewer of that size kept for the backward pass."""
        attn, values = self.attention(tokens, nodes, node_mask, own)
        attn = attn / attn.sum(-1, keepdim=True).clamp_min(1e-8)
        return torch.einsum("bgqp,bgpd->bgqd" if own else "bgqp,bpd->bgqd", attn, values)

    def attention(self, tokens: torch.Tensor, nodes: torch.Tensor, node_mask: torch.Tensor, own: bool = False):
        """The inverted cross-attention (B, G, N, P) of every graph's nodes over every image's patches, and the patches'
        values (B, P, D), or with `own` (1, B, N, P) and (1, B, P, D).

        Q' = [W_q LN(nodes); default queries], K, V = W_k LN(x), W_v LN(x); logits Q'Kᵀ/√D; a softmax over the *query*
        axis (padding queries excluded); default queries' rows dropped.
        """
        g, n, d = nodes.shape
        queries = torch.cat([self.q(self.norm_queries(nodes)), self.defaults.expand(g, -1, -1)], 1) / math.sqrt(d)
        live = torch.cat([node_mask, node_mask.new_ones(g, self.defaults.shape[0])], 1)
        tokens = self.norm_tokens(tokens)
        keys, values = self.k(tokens), self.v(tokens)
        if own:
            keys, values = keys[None], values[None]
        logits = torch.einsum("gqd,bgpd->bgqp" if own else "gqd,bpd->bgqp", queries, keys)
        # the lowest float, not -inf: a graph with no node and no default query would be 0/0 (NaN) for every image
        return logits.masked_fill(~live[None, :, :, None], torch.finfo(logits.dtype).min).softmax(dim=2)[:, :, :n], values

    def score(self, slots: torch.Tensor, nodes: torch.Tensor, node_mask: torch.Tensor, relations: torch.Tensor,
              ends: torch.Tensor, edge_mask: torch.Tensor) -> torch.Tensor:
        """S (B, G) from slots (B or 1, G, N, D) and the graphs' relations padded (G, E, D); `ends` (G, E, 2) are each
        relation's subject and object node. `score_listed` with the real relations listed (a read from the device, as
        `nonzero` is: the training loss passes them listed as they came)."""
        graph, edge = edge_mask.nonzero(as_tuple=True)
        return self.score_listed(slots, nodes, node_mask, relations[graph, edge], graph, ends[graph, edge], edge_mask.sum(-1))

    def score_listed(self, slots: torch.Tensor, nodes: torch.Tensor, node_mask: torch.Tensor, relations: torch.Tensor,
                     graph: torch.Tensor, ends: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        """S (B, G) from slots (B or 1, G, N, D) and the relations listed graph by graph: `relations` (L, D), `graph` (L,)
        the graph of each, `ends` (L, 2) its subject and object node, `edges` (G,) each graph's count of them.

        Written for speed and memory, the same sums as the padded form: the node cosines as dot products over the
        product of norms (`_cosines`: F.cosine_similarity makes several passes over the (B, G, N, D) slots, and under
        autocast keeps a float32 copy of them for the backward pass); the relation term over the batch's real relations
        only, not the (G, E) padding, with f_s and f_o's first layers taking [r_p, s] as two halves, the relation's once
        per relation (in the demo's world, 147 real relations in a batch of 128 graphs padded to 3 each). Nothing here
        is read back from the device."""
        node_term = (_cosines(slots, nodes) * node_mask).sum(-1)
        subject, obj = ends.T
        predicted = _halves(self.f_s, relations, slots[:, graph, subject]) + _halves(self.f_o, relations, slots[:, graph, obj])
        rel_term = node_term.new_zeros(node_term.shape).index_add_(1, graph, _cosines(predicted, relations))
        alpha, beta = self.log_alpha.exp(), self.log_beta.exp()
        count = alpha * node_mask.sum(-1) + beta * edges
        return (alpha * node_term + beta * rel_term) / count.clamp_min(1e-8)


def _cosines(many: torch.Tensor, few: torch.Tensor) -> torch.Tensor:
    """F.cosine_similarity of `many` (..., K, D) and `few` (K, D) along D, x·y / max(‖x‖‖y‖, 1e-8), keeping `many` once for
    the backward pass: the norms are summed in float32 from it as it is, where autocast (whose float32 operations include
    the norm and the cosine) would keep a float32 copy of it too; float64 features are summed in float64."""
    summed = torch.promote_types(many.dtype, torch.float32)
    with torch.autocast(many.device.type, enabled=False):
        norms = torch.linalg.vector_norm(many, dim=-1, dtype=summed) * torch.linalg.vector_norm(few, dim=-1, dtype=summed)
    return (many * few).sum(-1) / norms.clamp_min(1e-8)


def _halves(mlp: nn.Sequential, relation: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """`mlp(cat([relation, slot], -1))` for relations (L, D) against slots (B, L, D), the first layer split in two."""
    first, d = mlp[0], relation.shape[-1]
    hidden = F.linear(relation, first.weight[:, :d], first.bias) + F.linear(slot, first.weight[:, d:])
    return mlp[2](mlp[1](hidden))


def group_sizes(owner: torch.Tensor, groups: int) -> torch.Tensor:
    """How many rows each of `groups` owns, on the device (`bincount` reads its max back)."""
    return owner.new_zeros(groups).index_add_(0, owner, torch.ones_like(owner))


def padded(rows: torch.Tensor, owner: torch.Tensor, groups: int, longest: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows listed group by group (owner ascending) as (groups, longest, ...) and its mask; `longest`, where the same
    owners were padded already, is that width."""
    counts = group_sizes(owner, groups)
    if longest is None:  # a read from the device the data makes necessary: the padded width is the busiest graph's count
        longest = int(counts.max()) if len(owner) else 0
    first = torch.cumsum(counts, 0) - counts
    position = torch.arange(len(owner), device=rows.device) - first[owner]
    out = rows.new_zeros(groups, max(longest, 1), *rows.shape[1:])
    out[owner, position] = rows
    mask = torch.zeros(groups, max(longest, 1), dtype=torch.bool, device=rows.device)
    mask[owner, position] = True
    return out, mask


def perturb(edges: list[tuple[str, int, int]], nodes: int, rng) -> list[tuple[int, ...]]:
    """Each edge's ends for G, Ḡ and G̃: one edge (drawn by `rng`) gets its subject and object swapped in
    Ḡ and random ends from the graph's nodes in G̃ (any pair but its own); every other edge is unchanged."""
    chosen = rng.randrange(len(edges)) if edges else -1
    out = []
    for k, (_, s, o) in enumerate(edges):
        if k != chosen:
            out.append((s, o) * 3)
            continue
        others = [(a, b) for a in range(nodes) for b in range(nodes) if (a, b) != (s, o)]
        out.append((s, o, o, s, *rng.choice(others)))
    return out


class OCCLIPLoss(GatheredLoss):
    """OC-CLIP's loss over the batch of every rank, `{"itc": L_itc, "rel": λ_rel L_rel}`, each the full batch's value on
    every rank: `OCCLIPLoss(lambda_rel=, chunk=, rank=, world_size=)(binding, visual_tokens, image_features,
    node_features, node_image, relation_features, relation_image, relation_ends, logit_scale)`.

    `binding` is the trained `BindingModule` (the caller's optimizer holds it). This rank's images (rows) are scored
    against every rank's graphs (columns), `chunk` images at a time; the score rows of all ranks are gathered with
    gradients, so each rank adds its rows' and its graphs' share. Nodes, relations and `relation_ends` (per relation:
    subject, object; swapped; random, as `perturb` draws them) belong to the local image their `*_image` names.
    """

    def __init__(self, lambda_rel: float = 1.0, chunk: int = 32, rank: int = 0, world_size: int = 1, group=None):
        super().__init__(rank, world_size, group)
        self.lambda_rel, self.chunk = lambda_rel, chunk

    def forward(self, binding: BindingModule, visual_tokens, image_features, node_features, node_image, relation_features,
                relation_image, relation_ends, logit_scale) -> dict[str, torch.Tensor]:
        self.check_inputs(image_features, per_image={"visual_tokens": visual_tokens}, node_features=node_features, node_image=node_image,
                          relation_features=relation_features, relation_image=relation_image, relation_ends=relation_ends,
                          logit_scale=logit_scale)
        tokens, gather = visual_tokens, self.gather
        b = tokens.shape[0]
        counts = gather.counts(image_features)
        offset, g = gather.first(counts), sum(counts)
        own_relations, own_image, own_ends = relation_features, relation_image, relation_ends  # this rank's graphs'
        node_features, node_image = gather.owned(node_features, node_image, counts)
        relation_counts = gather.counts(relation_features)
        relation_features = gather.rows(relation_features, relation_counts)
        relation_ends = gather.rows(relation_ends, relation_counts)
        relation_image = gather.rows(relation_image + offset, relation_counts)
        nodes, node_mask = padded(node_features, node_image, g)  # the one read from the device, the busiest graph's nodes
        # The relations stay listed as they came, graph by graph, and nothing below is sized by a value: on a GPU every
        # `nonzero` or boolean mask makes the host wait for the work queued before it (OC-CLIP's step took 1.69× CLIP's
        # at ViT-B-16 with a dozen such waits a step, its GPU idle a quarter of the time).
        edges = group_sizes(relation_image, g)
        local = torch.cat([binding.score_listed(binding.slots(tokens[c : c + self.chunk], nodes, node_mask), nodes, node_mask,
                                                relation_features, relation_image, relation_ends[:, :2], edges)
                           for c in range(0, b, self.chunk)])
        scores = gather.rows(local, counts)  # (g, g)
        scale, mine = logit_scale, torch.arange(offset, offset + b, device=tokens.device)
        # A caption with no node trains on nothing: its image's row and its graph's column masked (the lowest float
        # adds an exact 0 to each softmax's sum, as leaving them out would), its own terms multiplied by nothing.
        dead = ~node_mask.any(-1)
        logits = scale * scores
        logits = logits.masked_fill(dead[:, None] | dead[None, :], torch.finfo(logits.dtype).min)
        live = ~dead[mine]
        itc = (torch.where(live, F.cross_entropy(logits[mine], mine, reduction="none"), 0).sum()
               + torch.where(live, F.cross_entropy(logits.T[mine], mine, reduction="none"), 0).sum())
        # the pooled image features take no part (S reads patch tokens), but DDP wants every trained parameter in the graph
        unused = 0 * image_features.sum()
        graphs = (~dead).sum().clamp_min(1)  # the paper sums both terms over the batch: one count divides both
        terms = {"itc": gather.total(itc / graphs + unused)}
        if self.lambda_rel:
            own = binding.slots(tokens, nodes[mine], node_mask[mine], own=True)
            variants = [local[torch.arange(b), mine]] + [
                binding.score_listed(own, nodes[mine], node_mask[mine], own_relations, own_image, own_ends[:, k : k + 2], edges[mine])[0]
                for k in (2, 4)]
            z = scale * torch.stack(variants, -1)
            loss = torch.where(edges[mine] > 0, F.cross_entropy(z, z.new_zeros(b, dtype=torch.long), reduction="none"), 0).sum()
            terms["rel"] = gather.total(self.lambda_rel * loss / graphs)
        return terms


@dataclass(frozen=True)
class Options:
    default_queries: int = option(1, "learned default queries joined to the projected node queries, their slots dropped (the "
                                     "paper's full model: 1)")
    lambda_rel: float = option(1.0, "weight of L_rel (swapped and random relation ends); 0 turns it off")
    module_lr: float = option(2e-4, "learning rate of the binding module, trained from scratch (the paper's)")
    chunk: int = option(32, "images scored against all graphs at a time (bounds memory)")
    layer: int = option(-1, "vision block whose patch tokens the module binds (-1: the last; the paper found earlier ones help)")


class OCCLIPPart(LossPart):
    name = "occlip"
    contrastive = True
    needs = frozenset({"visual_tokens"})
    uses_concepts = True
    token_fields = ("graph_text",)
    reads_captions = False  # S reads the graph's node and relation texts, never the whole caption
    outputs: ClassVar[Mapping[str, Output]] = {
        "node_features": owned("node_image"), "relation_features": owned("relation_image"), "relation_ends": owned("relation_image"),
    }

    def __init__(self, options: Options = Options(), seed: int = 0):
        super().__init__()
        o = options
        if o.default_queries < 0 or o.chunk < 1:
            raise UsageError(f"occlip: default_queries must be >= 0 and chunk >= 1, not {o.default_queries} and {o.chunk}")
        self.seed, self.default_queries, self.chunk = seed, o.default_queries, o.chunk
        self.loss = OCCLIPLoss(o.lambda_rel, o.chunk)
        self.lr, self.visual_layer = o.module_lr, o.layer
        self.binding: BindingModule | None = None

    def bind(self, model):
        check_layer(model, self.visual_layer)
        with torch.no_grad():  # the joint embedding's width, whatever the towers
            dim = model.encode_text(torch.zeros(1, model.context_length, dtype=torch.long, device=model.logit_scale.device)).shape[-1]
        self.binding = BindingModule(dim, self.default_queries)

    def scorer(self, model, preprocess, tokenizer, **kwargs):
        return GraphScorer(self.binding, model, preprocess, tokenizer, chunk=self.chunk, layer=self.visual_layer, **kwargs)

    def prepare(self, batch, samples, tokenizer):
        texts: dict[str, int] = {}
        node_text, node_image, rel_text, rel_image, ends = [], [], [], [], []
        for i, (caption, record) in enumerate(zip(batch["caption"], batch["concepts"], strict=True)):
            graph = (record or {}).get("graph") or {"nodes": [], "edges": []}
            for text, *_ in graph["nodes"]:
                node_text.append(texts.setdefault(text, len(texts)))
                node_image.append(i)
            edges = [e for e in graph["edges"] if max(e[1], e[2]) < len(graph["nodes"])]
            for (relation, *_), row in zip(edges, perturb(edges, len(graph["nodes"]), caption_rng(self.seed, caption)), strict=True):
                rel_text.append(texts.setdefault(relation, len(texts)))
                rel_image.append(i)
                ends.append(row)
        batch["graph_text"] = tokenizer(list(texts)) if texts else batch["text"][:0]
        long = lambda x: torch.tensor(x, dtype=torch.long)  # noqa: E731
        batch["node_text"], batch["node_image"] = long(node_text), long(node_image)
        batch["relation_text"], batch["relation_image"] = long(rel_text), long(rel_image)
        batch["relation_ends"] = long(ends).reshape(-1, ENDS)

    def extend(self, model, batch, out):
        texts = batch["graph_text"]
        embedded = encode_short_texts(model, texts, text_width_of(batch, "graph_text")) if texts.shape[0] else out["image_features"][:0]
        embedded = F.normalize(embedded, dim=-1)
        out["node_features"], out["node_image"] = embedded[batch["node_text"]], batch["node_image"]
        out["relation_features"], out["relation_image"] = embedded[batch["relation_text"]], batch["relation_image"]
        out["relation_ends"] = batch["relation_ends"]

    def forward(self, out):
        return self.loss(self.binding, out["visual_tokens"], out["image_features"], out["node_features"], out["node_image"],
                         out["relation_features"], out["relation_image"], out["relation_ends"], out["logit_scale"])


class GraphScorer(DualEncoderScorer):
    """OC-CLIP's graph-conditioned score. Each caption is parsed into a scene graph once (spaCy, cached in
    the scorer), its nodes and relations encoded as short texts by the text tower, each image's patch
    tokens (of block `layer`) encoded once, and `binding` (an `occlip.BindingModule`) scores an image against a graph.
    A caption without a noun phrase scores 0. There is no text-to-text score (SugarCrepe++ TOT: n/a)."""

    def __init__(self, binding, model, preprocess, tokenizer, chunk: int = 32, layer: int = -1, **settings):
        super().__init__(model, preprocess, tokenizer, **settings)
        self.binding, self.chunk, self.layer = binding, chunk, layer
        self._tokens: dict[str, torch.Tensor] = {}
        self._graphs: dict[str, dict] = {}
        self._blind_tokens: torch.Tensor | None = None  # the one set of patch tokens of a blind run (`blind`)
        self._nlp = None  # spaCy, loaded on the first captions and kept: every benchmark brings new ones
        self.encoded["tokens"] = 0

    class_scores = Scorer.class_scores  # every prompt scored as a graph, then averaged

    def text_pairs(self, a, b):
        return None

    def pairs(self, images, texts, boxes=None):
        tokens, graph = self.tokens(images, boxes), self.graphs(texts)
        with torch.no_grad():
            slots = self.binding.slots(tokens, graph[0], graph[1], own=True)
            return self.binding.score(slots, *graph)[0].cpu()

    def matrix(self, images, texts):
        tokens, graph = self.tokens(images), self.graphs(texts)
        with torch.no_grad():
            return torch.cat([self.binding.score(self.binding.slots(tokens[c : c + self.chunk], graph[0], graph[1]), *graph).cpu()
                              for c in range(0, len(tokens), self.chunk)])

    def tokens(self, images, boxes=None) -> torch.Tensor:
        """Patch tokens in the joint space, (len(images), P, D), each image encoded once; under `blind`, the one set of
        tokens it gives for every image."""
        keys = self._image_keys(images, boxes)
        if self._blind_tokens is not None:
            return self._blind_tokens.expand(len(keys), -1, -1).to(self.device)
        self._fill(self._tokens, keys, "tokens", self._encode_tokens)
        self._check_read(keys)
        self._asked.update(keys)
        return torch.stack([self._tokens[k] for k in keys]).to(self.device)

    @contextlib.contextmanager
    def blind(self, keys: set[str]) -> Iterator[None]:
        """`compclip eval --blind` for the binding module, which reads an image's patch tokens, not one embedding: inside
        the block every image gives the mean of the tokens of `keys`, patch by patch (our choice), so a score depends on
        the caption's graph alone."""
        if not keys:
            raise ValueError("blind: no image was scored to average")
        self._blind_tokens = torch.stack([self._tokens[k] for k in sorted(keys)]).mean(0)
        try:
            yield
        finally:
            self._blind_tokens = None

    def graphs(self, captions):
        """The captions' graphs as the binding module takes them: nodes, node mask, relations, ends, edge mask."""
        from ..concepts import extract, load_nlp

        todo = [c for c in dict.fromkeys(captions) if c not in self._graphs]
        if todo:
            self._nlp = self._nlp or load_nlp()
            self._graphs.update((c, r["graph"]) for c, r in zip(todo, extract(todo, "graph", nlp=self._nlp), strict=True))
        parsed = [self._graphs[c] for c in captions]
        nodes = [(t, i) for i, g in enumerate(parsed) for t, *_ in g["nodes"]]
        edges = [(r, s, o, i) for i, g in enumerate(parsed) for r, s, o in g["edges"] if max(s, o) < len(g["nodes"])]
        texts = list(dict.fromkeys([t for t, _ in nodes] + [r for r, *_ in edges]))
        embedded = dict(zip(texts, self.texts(texts), strict=True)) if texts else {}
        d = next(iter(embedded.values())).shape[-1] if embedded else 1
        rows = lambda items: torch.stack(items) if items else torch.zeros(0, d)  # noqa: E731
        owner = lambda items: torch.tensor([x[-1] for x in items], dtype=torch.long)  # noqa: E731
        node_rows, node_mask = padded(rows([embedded[t] for t, _ in nodes]), owner(nodes), len(captions))
        relations, edge_mask = padded(rows([embedded[r] for r, *_ in edges]), owner(edges), len(captions))
        ends, _ = padded(torch.tensor([[s, o] for _, s, o, _ in edges], dtype=torch.long).reshape(-1, 2), owner(edges), len(captions),
                         edge_mask.shape[1])
        return tuple(t.to(self.device) for t in (node_rows, node_mask, relations, ends, edge_mask))

    def _encode_tokens(self, keys: list[str]) -> tuple[list[str], torch.Tensor]:
        return self._over_images(keys, "image tokens", lambda batch: visual_token_embeddings(self.model, batch, self.layer)[1])


def build(options: Options, *, concepts=None, seed: int = 0) -> list[LossPart]:
    return [OCCLIPPart(options, seed)]


register_method("occlip", build, Options, ("graph",))
