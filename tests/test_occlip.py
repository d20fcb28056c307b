"""OC-CLIP against per-pair loops written independently: binding attention, structured score, L_itc, L_rel."""
import math
import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import compclip.models
from compclip.methods import build_method
from compclip.methods.occlip import BindingModule, padded, perturb

D = 8


def graphs(rng, count):
    """Random graphs: (nodes (n, D), edges [(relation (D,), s, o)]) with 1-3 nodes and 0-3 edges."""
    out = []
    for _ in range(count):
        n = rng.randint(1, 3)
        nodes = F.normalize(torch.randn(n, D), dim=-1)
        edges = [(F.normalize(torch.randn(D), dim=0), rng.randrange(n), rng.randrange(n)) for _ in range(rng.randint(0, 3))]
        out.append((nodes, edges))
    return out


def layer_norm(x, norm):
    """One vector's layer norm, written out."""
    centred = x - x.mean()
    shift = 0 if norm.bias is None else norm.bias
    return centred / torch.sqrt((centred**2).mean() + norm.eps) * norm.weight + shift


def brute_slots(module, tokens, nodes):
    """Slot i of one image for one graph, from the formula: Q' = [W_q LN(nodes); defaults], softmax over queries for each
    patch, then a weighted mean."""
    queries = [module.q(layer_norm(n, module.norm_queries)) for n in nodes] + list(module.defaults)
    normed = torch.stack([layer_norm(t, module.norm_tokens) for t in tokens])
    keys, values = module.k(normed), module.v(normed)
    weights = torch.zeros(len(queries), tokens.shape[0])
    for p in range(tokens.shape[0]):
        logits = torch.stack([q @ keys[p] / math.sqrt(q.shape[0]) for q in queries])
        weights[:, p] = torch.exp(logits - logits.max()) / torch.exp(logits - logits.max()).sum()
    return [sum(weights[i, p] * values[p] for p in range(tokens.shape[0])) / weights[i].sum() for i in range(len(nodes))]


def brute_score(module, tokens, nodes, edges):
    slots = brute_slots(module, tokens, nodes)
    alpha, beta = module.log_alpha.exp(), module.log_beta.exp()
    node_sum = sum(F.cosine_similarity(n, s, dim=0) for n, s in zip(nodes, slots, strict=True))
    rel_sum = sum(F.cosine_similarity(r, module.f_s(torch.cat([r, slots[s]])) + module.f_o(torch.cat([r, slots[o]])), dim=0)
                  for r, s, o in edges)
    return (alpha * node_sum + beta * rel_sum) / (alpha * len(nodes) + beta * len(edges))


def sharpen(module):
    """Peaked attention and norms away from their initial identity, so that a wrong scale, softmax axis or norm shows."""
    with torch.no_grad():
        module.q.weight.mul_(4)
        module.k.weight.mul_(4)
        for norm in (module.norm_queries, module.norm_tokens):
            norm.weight.uniform_(0.5, 1.5)
        module.norm_tokens.bias.normal_(0, 0.1)


def batched(gs):
    node_rows = torch.cat([n for n, _ in gs])
    node_owner = torch.cat([torch.full((len(n),), i) for i, (n, _) in enumerate(gs)])
    rel_rows = [r for _, e in gs for r, _, _ in e]
    rel_owner = torch.tensor([i for i, (_, e) in enumerate(gs) for _ in e], dtype=torch.long)
    ends_rows = torch.tensor([[s, o] for _, e in gs for _, s, o in e], dtype=torch.long).reshape(-1, 2)
    nodes, node_mask = padded(node_rows, node_owner, len(gs))
    relations, edge_mask = padded(torch.stack(rel_rows) if rel_rows else torch.zeros(0, D), rel_owner, len(gs))
    ends, _ = padded(ends_rows, rel_owner, len(gs))
    return nodes, node_mask, relations, ends, edge_mask


def test_binding_attention_and_structured_score_equal_a_loop_over_pairs():
    torch.manual_seed(0)
    module = BindingModule(D, default_queries=3)
    sharpen(module)
    with torch.no_grad():
        module.log_alpha.fill_(0.3)
        module.log_beta.fill_(-0.4)
    gs = graphs(random.Random(0), 5)
    tokens = torch.randn(4, 6, D)
    nodes, node_mask, relations, ends, edge_mask = batched(gs)
    scores = module.score(module.slots(tokens, nodes, node_mask), nodes, node_mask, relations, ends, edge_mask)
    expected = torch.stack([torch.stack([brute_score(module, t, n, e) for n, e in gs]) for t in tokens])
    torch.testing.assert_close(scores, expected, rtol=1e-5, atol=1e-5)
    own = module.score(module.slots(tokens, nodes[:4], node_mask[:4], own=True), nodes[:4], node_mask[:4], relations[:4], ends[:4],
                       edge_mask[:4])
    torch.testing.assert_close(own[0], torch.diagonal(expected[:, :4]), rtol=1e-5, atol=1e-5)


def test_a_graph_without_nodes_scores_zero_and_leaves_the_others_alone():
    """Without default queries every query of an empty graph is padding; its score was NaN, and zero-shot prompts
    with no noun ('something red.') made every class NaN, a tie, so zero-shot colour read 0 %."""
    torch.manual_seed(0)
    module = BindingModule(D, default_queries=0)
    gs = graphs(random.Random(1), 3)
    tokens = torch.randn(2, 6, D)
    with_empty = batched([*gs[:1], (torch.zeros(0, D), []), *gs[1:]])
    scores = module.score(module.slots(tokens, *with_empty[:2]), *with_empty)
    assert torch.equal(scores[:, 1], torch.zeros(2))
    nodes, node_mask, relations, ends, edge_mask = batched(gs)
    alone = module.score(module.slots(tokens, nodes, node_mask), nodes, node_mask, relations, ends, edge_mask)
    torch.testing.assert_close(scores[:, [0, 2, 3]], alone, rtol=1e-6, atol=1e-6)


def kept_while(forward):
    """`forward()`'s result and the shape and dtype of every tensor autograd keeps for its backward pass, each storage
    once (as saved-tensor hooks see them)."""
    kept = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = (tuple(t.shape), t.dtype)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        return forward(), list(kept.values())


def slots_kept(device="cpu", autocast=False):
    """How many tensors of the slots' size (images, graphs, nodes, D) the score of every image against every graph keeps."""
    torch.manual_seed(0)
    module = BindingModule(D, default_queries=1).to(device)
    nodes, node_mask, relations, ends, edge_mask = (t.to(device) for t in batched(graphs(random.Random(0), 5)))
    nodes, relations = nodes.requires_grad_(), relations.requires_grad_()  # text-tower outputs, as in training
    tokens = torch.randn(4, 6, D, device=device, requires_grad=True)
    with torch.autocast(device, torch.bfloat16, enabled=autocast):
        _, kept = kept_while(lambda: module.score(module.slots(tokens, nodes, node_mask), nodes, node_mask, relations, ends, edge_mask))
    return [dtype for shape, dtype in kept if shape == (4, 5, nodes.shape[1], D)]


def test_the_score_keeps_the_slots_once():
    """At ViT-B-16's batch of 256 the (B, G, N, D) slots of every image against every graph are OC-CLIP's largest
    tensors: the weights are renormalised before the values are weighted (one such tensor fewer, the slots before their
    division) and the norms read the slots as they are (`benchmarks/occlip_memory.py`). Under CUDA's autocast a float32
    copy is kept as well unless the norm is taken outside it: `tests/test_cuda.py`."""
    assert slots_kept() == [torch.float32]
    assert slots_kept(autocast=True) == [torch.bfloat16]  # CPU autocast keeps bfloat16 for the norm and the product


def test_slots_of_different_nodes_differ_from_the_start_whatever_the_embedding_scale():
    """Unit node embeddings and patch tokens of norm 0.35 (a trained tiny SigLIP's) gave attention logits of std 0.03
    without the layer norms: every slot was the image's mean (1 - cos between two nodes' slots: 5e-6), and stayed so
    through 300 steps, so the module bound nothing. At initialisation slots must already differ, at any scale."""
    torch.manual_seed(0)
    module = BindingModule(64, default_queries=4)
    nodes = F.normalize(torch.randn(1, 3, 64), dim=-1)
    for scale in (0.35, 3.0):
        slots = module.slots(scale * F.normalize(torch.randn(2, 49, 64), dim=-1), nodes, torch.ones(1, 3, dtype=torch.bool))[:, 0]
        apart = 1 - F.cosine_similarity(slots[:, :, None], slots[:, None], dim=-1)
        assert apart[:, [0, 0, 1], [1, 2, 2]].min() > 0.02, (scale, apart)


def test_perturbed_graphs_are_what_they_claim():
    rng = random.Random(1)
    for _ in range(200):
        n = rng.randint(2, 4)
        edges = [("rel", rng.randrange(n), rng.randrange(n)) for _ in range(rng.randint(1, 4))]
        rows = perturb(edges, n, random.Random(rng.random()))
        changed = [k for k, row in enumerate(rows) if row[2:] != row[:2] * 2]
        assert len(changed) == 1, "exactly one relation is perturbed"
        s, o, sb, ob, st, ot = rows[changed[0]]
        assert (s, o) == edges[changed[0]][1:] and (sb, ob) == (o, s), "Ḡ swaps that relation's subject and object"
        assert 0 <= st < n and 0 <= ot < n and (st, ot) != (s, o), "G̃ gives it other ends from the graph's nodes"
        assert all(rows[k] == (e[1], e[2]) * 3 for k, e in enumerate(edges) if k != changed[0])
    assert perturb([], 3, random.Random(0)) == []


def test_losses_equal_brute_force_and_captions_without_nodes_train_on_nothing():
    """L_itc and L_rel through the method's own batch transform and forward, against logsumexp over the brute-force scores."""
    from compclip.models import load_model

    captions = ["a red square to the left of a blue circle", "a green star above a yellow triangle", "very bright",
                "a small cat on a large mat", "a dog next to a tree and a car"]
    nodes = {"a red square to the left of a blue circle": (["a red square", "a blue circle"], [("to the left of", 0, 1)]),
             "a green star above a yellow triangle": (["a green star", "a yellow triangle"], [("above", 0, 1)]),
             "very bright": ([], []),
             "a small cat on a large mat": (["a small cat", "a large mat"], [("on", 0, 1)]),
             "a dog next to a tree and a car": (["a dog", "a tree", "a car"], [("next to", 0, 1)])}
    records = {c: {"caption": c, "graph": {"nodes": [(t, 0, 0) for t in n], "edges": e}} for c, (n, e) in nodes.items()}
    torch.manual_seed(0)
    model, _, tokenizer = load_model("compclip-tiny-siglip")
    method = build_method("occlip", concepts=records, seed=3, default_queries=2).bind(model)
    sharpen(method.parts[0].binding)
    samples = [{"image": torch.randn(3, 64, 64), "caption": c} for c in captions]
    batch = method.collate(samples, tokenizer)
    out = method.outputs(model, batch)
    assert "text_features" not in out  # S reads graph texts: the captions themselves never pass the text tower
    terms = method(out)
    part = method.parts[0]
    with torch.no_grad():
        tokens = out["visual_tokens"]
        texts = {t for c in captions for t in nodes[c][0] + [r for r, *_ in nodes[c][1]]}
        embed = {t: F.normalize(model.encode_text(tokenizer([t])), dim=-1)[0] for t in texts}
        gs = [([embed[t] for t in nodes[c][0]], [(embed[r], s, o) for r, s, o in nodes[c][1]]) for c in captions]
        live = [i for i, (n, _) in enumerate(gs) if n]
        scale = model.logit_scale.exp()
        s = torch.stack([torch.stack([brute_score(part.binding, tokens[i], *gs[j]) for j in live]) for i in live]) * scale
        # the paper's sums over the batch (both divided by one count, the graphs with nodes)
        itc = sum(-s[a, a] + torch.logsumexp(s[a], 0) - s[a, a] + torch.logsumexp(s[:, a], 0) for a in range(len(live))) / len(live)
        ends = batch["relation_ends"].tolist()
        rel, k = [], 0
        for i, (n, e) in enumerate(gs):
            if not e:
                continue
            rows = ends[k : k + len(e)]
            k += len(e)
            variant = lambda v: [(r, row[v], row[v + 1]) for (r, _, _), row in zip(e, rows, strict=True)]  # noqa: B023, E731
            z = torch.stack([brute_score(part.binding, tokens[i], n, variant(v)) for v in (0, 2, 4)]) * scale
            rel.append(torch.logsumexp(z, 0) - z[0])
        assert torch.allclose(terms["itc"], itc, rtol=1e-5, atol=1e-5)
        assert torch.allclose(terms["rel"], torch.stack(rel).sum() / len(live), rtol=1e-5, atol=1e-5)
        without = method(method.outputs(model, method.collate([samples[i] for i in live], tokenizer)))
        assert torch.allclose(without["itc"], terms["itc"], rtol=1e-5, atol=1e-5), "a caption with no node changes nothing"


@pytest.mark.parametrize("name", ["compclip-tiny-siglip", "compclip-tiny-clip"])
def test_patch_tokens_of_an_earlier_layer(name):
    """`layer`: the last block by index equals the default path; block 0's tokens ignore block 1 and feed the method and
    its scorer; a block the tower lacks is refused when the method binds, before any step."""
    from compclip.errors import UsageError
    from compclip.models import load_model
    from compclip.models.tokens import visual_token_embeddings

    torch.manual_seed(0)
    model, _, _ = load_model(name)
    model.eval()
    blocks = getattr(getattr(model.visual, "trunk", None), "blocks", None) or model.visual.transformer.resblocks
    images = torch.randn(2, 3, *model.visual.image_size)
    with torch.no_grad():
        pooled, last = visual_token_embeddings(model, images)
        pooled_1, last_1 = visual_token_embeddings(model, images, len(blocks) - 1)
        _, first = visual_token_embeddings(model, images, 0)
        for p in blocks[-1].parameters():
            p.add_(torch.randn_like(p))
        pooled_changed, first_changed = visual_token_embeddings(model, images, 0)
    assert torch.allclose(pooled, pooled_1) and torch.allclose(last, last_1, atol=1e-6)
    assert not torch.allclose(first, last, atol=1e-3)
    assert torch.allclose(first, first_changed, atol=1e-6) and not torch.allclose(pooled, pooled_changed, atol=1e-3)
    method = build_method("occlip", concepts={}, layer=0).bind(model)
    assert method.visual_layer == 0 and method.scorer(model, None, None).layer == 0
    with pytest.raises(UsageError, match=f"layer {len(blocks)} does not exist: the vision tower has {len(blocks)} blocks"):
        build_method("occlip", concepts={}, layer=len(blocks)).bind(model)


def test_a_timm_vit_with_a_class_token_is_a_backbone(tmp_path):
    """A DINOv2-style timm tower (class token, no attention pool) behind open_clip: its patch tokens, against timm's own
    `forward_intermediates` through open_clip's projection, feed OC-CLIP's loss, whose gradient reaches the module."""
    import json

    import open_clip

    from compclip.models.tokens import visual_token_embeddings

    config = json.loads((Path(compclip.models.__file__).parent / "configs" / "compclip-tiny-siglip.json").read_text())
    config["vision_cfg"] = {"image_size": 224, "timm_model_name": "vit_tiny_patch16_224", "timm_model_pretrained": False,
                            "timm_pool": "token", "timm_proj": "linear"}
    (tmp_path / "timm-token-vit.json").write_text(json.dumps(config))
    open_clip.add_model_config(tmp_path)
    torch.manual_seed(0)
    model = open_clip.create_model("timm-token-vit", pretrained=None)
    model.eval()
    images = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        pooled, tokens = visual_token_embeddings(model, images)
        _, inner = model.visual.trunk.forward_intermediates(images, indices=[-1], norm=True, output_fmt="NLC")
        assert torch.allclose(pooled, model.encode_image(images), atol=1e-6)
        assert torch.allclose(tokens, model.visual.head(inner[0]), atol=1e-5) and tokens.shape == (2, 196, 64)
    records = {"a red square above a blue circle": {"graph": {"nodes": [["a red square", 0, 0], ["a blue circle", 0, 0]],
                                                               "edges": [["above", 0, 1]]}},
               "a green star": {"graph": {"nodes": [["a green star", 0, 0]], "edges": []}}}
    method = build_method("occlip", concepts=records, layer=-2).bind(model)
    tokenizer = open_clip.SimpleTokenizer(context_length=64)
    batch = method.collate([{"image": images[i], "caption": c} for i, c in enumerate(records)], tokenizer)
    terms = method(method.outputs(model, batch))
    sum(terms.values()).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in method.parts[0].binding.q.parameters())


def test_a_typo_in_its_options_is_an_error():
    with pytest.raises(ValueError, match="did you mean lambda_rel"):
        build_method("occlip", concepts={}, lamda_rel=2)


def test_checkpoint_round_trip_and_exact_resume(tmp_path):
    """The binding module is saved with the checkpoint, restored by a resumed run (same next losses) and by `load_scorer`."""
    import json
    import shutil

    from compclip.concepts import build_store, iter_captions
    from compclip.eval import load_scorer
    from compclip.methods.occlip import GraphScorer
    from compclip.models import load_model
    from compclip.models.checkpoint import load_module_weights
    from compclip.train import TrainConfig, train
    from test_train import make_dataset

    data = make_dataset(tmp_path, n=16)
    build_store(iter_captions(data), tmp_path / "concepts", "graph")
    common = {"method": "occlip", "model": "compclip-tiny-siglip", "train_data": str(data), "concepts": str(tmp_path / "concepts"),
              "batch_size": 8, "lr": 1e-3, "workers": 0, "save_every": 2, "keep": 3}
    train(TrainConfig(out=str(tmp_path / "a"), steps=4, **common))
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # b: as if killed after its checkpoint at step 2
    shutil.rmtree(tmp_path / "b" / "checkpoints" / "step_0000004")
    (tmp_path / "b" / "checkpoints" / "latest").write_text("step_0000002")
    train(TrainConfig(out=str(tmp_path / "b"), steps=4, **common))
    losses = {run: {r["step"]: r["loss"] for r in map(json.loads, (tmp_path / run / "log.jsonl").read_text().splitlines())}
              for run in ("a", "b")}
    assert losses["a"] == pytest.approx(losses["b"], rel=1e-6) and set(losses["a"]) == {1, 2, 3, 4}
    assert (tmp_path / "b" / "checkpoints" / "step_0000004" / "method.safetensors").is_file()
    final = tmp_path / "a" / "checkpoints" / "step_0000004"
    first = tmp_path / "a" / "checkpoints" / "step_0000002"
    model, _, _ = load_model(str(final))
    restored = {}
    for folder in (first, final):
        method = build_method("occlip", concepts={}).bind(model)
        load_module_weights(method, folder)
        restored[folder.name] = {k: v.clone() for k, v in method.state_dict().items()}
    assert restored["step_0000004"].keys() == {f"parts.0.binding.{k}" for k in BindingModule(64, 4).state_dict()}
    assert any(not torch.equal(restored["step_0000002"][k], restored["step_0000004"][k]) for k in restored["step_0000004"])
    scorer = load_scorer(str(final), workers=0)
    assert isinstance(scorer, GraphScorer)
    assert all(torch.equal(v, restored["step_0000004"][f"parts.0.binding.{k}"]) for k, v in scorer.binding.state_dict().items())


def test_the_graph_scorer_equals_brute_force_and_runs_every_world_benchmark(tmp_path):
    """Checkpoints of OC-CLIP are scored by their binding module: pairs and the retrieval matrix against
    per-pair loops from the image file and the parsed caption up, and blind (every image the mean of the scored images'
    patch tokens); every world benchmark completes; TOT is n/a."""
    import json

    from compclip.concepts import extract
    from compclip.data import decode_image
    from compclip.eval import REGISTRY
    from compclip.methods.occlip import GraphScorer
    from compclip.models import load_model
    from compclip.models.tokens import visual_token_embeddings
    from compclip.world import WorldConfig, generate

    world = generate(tmp_path / "w", WorldConfig(seed=0, n_train=8, n_val=2, n_test=12, size=64), workers=1)
    root = world / "test_unseen"
    torch.manual_seed(0)
    model, preprocess, tokenizer = load_model("compclip-tiny-siglip")
    method = build_method("occlip", concepts={}, chunk=5).bind(model).eval()
    sharpen(method.parts[0].binding)
    scorer = method.scorer(model.eval(), preprocess, tokenizer, workers=0)
    assert isinstance(scorer, GraphScorer)
    records = list(json.loads((root / "sugarcrepe" / "swap_att.json").read_text()).values())[:6]
    files = [root / "coco" / "val2017" / r["filename"] for r in records]
    texts = [r["caption"] for r in records] + [r["negative_caption"] for r in records] + ["very bright"]
    binding = method.parts[0].binding
    with torch.no_grad():
        per_image = [visual_token_embeddings(model, preprocess(decode_image(file))[None])[1][0] for file in files]
        mean_image = torch.stack(per_image).mean(0)  # --blind's one image: the mean tokens, patch by patch
        expected = torch.zeros(len(files) + 1, len(texts))
        for a, tokens in enumerate([*per_image, mean_image]):
            for b, graph in enumerate(r["graph"] for r in extract(texts, "graph")):
                encode = lambda t: F.normalize(model.encode_text(tokenizer([t])), dim=-1)[0]  # noqa: E731
                nodes = [encode(t) for t, *_ in graph["nodes"]]
                expected[a, b] = brute_score(binding, tokens, nodes, [(encode(r), s, o) for r, s, o in graph["edges"]]) if nodes else 0
        expected, blind = expected[:-1], expected[-1]
    torch.testing.assert_close(scorer.matrix(files, texts), expected, rtol=1e-5, atol=1e-5)
    with scorer.asked() as asked:
        torch.testing.assert_close(scorer.pairs(files, texts[: len(files)]), torch.diagonal(expected), rtol=1e-5, atol=1e-5)
    with scorer.blind(asked):
        torch.testing.assert_close(scorer.pairs(files, texts[: len(files)]), blind[: len(files)], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(scorer.matrix(files[:2], texts), blind.expand(2, -1), rtol=1e-5, atol=1e-5)
    for name in ("sugarcrepe", "sugarcrepe_pp", "zeroshot", "retrieval"):
        result = REGISTRY[name].run(scorer, root, "strict")
        assert result.complete, name
    assert result.metrics["world"]["images"] == 12
    assert REGISTRY["sugarcrepe_pp"].run(scorer, root, "strict").metrics["overall_tot"] == "n/a"
