"""C2LIP's pieces against references written independently: brute-force loops, open_clip's own forward."""
import math

import open_clip
import pytest
import torch
import torch.nn.functional as F

from compclip.concepts import extract
from compclip.methods import build_method
from compclip.methods.c2lip import (
    attribute_swaps,
    concept_token_spans,
    modified_phrases,
    npc_loss,
    span_embeddings,
    visual_token_embeddings,
    xac_loss,
)
from compclip.models import load_model
from compclip.models.tokens import _timm_tokens, text_token_states


def brute_npc(img, con, owner, scale, bias, offset=0, n=None):
    total = 0.0
    for i in range(img.shape[0]):
        for j in range(con.shape[0]):
            z = 1.0 if owner[j] == i + offset else -1.0
            total = total - math.log(1 / (1 + math.exp(-z * (scale * float(img[i] @ con[j]) + bias))))
    return total / (n or con.shape[0])


def brute_xac(tokens, con, owner, scale, bias, temperature, offset=0, n=None):
    total = 0.0
    for i in range(tokens.shape[0]):
        for j in range(con.shape[0]):
            scores = [float(tokens[i, m] @ con[j]) / temperature for m in range(tokens.shape[1])]
            peak = max(scores)
            weights = [math.exp(s - peak) for s in scores]
            weights = [w / sum(weights) for w in weights]
            pooled = sum(w * tokens[i, m] for m, w in enumerate(weights))
            cos = float(pooled @ con[j]) / float(pooled.norm())
            z = 1.0 if owner[j] == i + offset else -1.0
            total = total + math.log1p(math.exp(-z * (scale * cos + bias)))
    return total / (n or con.shape[0])


@pytest.fixture
def problem():
    g = torch.Generator().manual_seed(3)
    B, M, D, K = 5, 7, 12, 11
    return {
        "img": F.normalize(torch.randn(B, D, generator=g), dim=-1),
        "tokens": torch.randn(B, M, D, generator=g) * 2,
        "con": F.normalize(torch.randn(K, D, generator=g), dim=-1),
        "owner": torch.randint(0, B, (K,), generator=g),
    }


def test_npc_loss_matches_a_double_loop(problem):
    p = problem
    got = npc_loss(p["img"], p["con"], p["owner"], torch.tensor(10.0), torch.tensor(-2.0))
    assert got.item() == pytest.approx(brute_npc(p["img"], p["con"], p["owner"], 10.0, -2.0), rel=1e-5)
    # local rows of a bigger batch: images 3..7 of 20 concepts' global owners
    got = npc_loss(p["img"], p["con"], p["owner"] + 3, 10.0, None, image_offset=3, n_concepts=20)
    assert got.item() == pytest.approx(brute_npc(p["img"], p["con"], p["owner"] + 3, 10.0, 0.0, offset=3, n=20), rel=1e-5)


@pytest.mark.parametrize("temperature", [None, 1.0, 0.05])
def test_xac_loss_matches_a_double_loop(problem, temperature):
    p = problem
    t = math.sqrt(p["tokens"].shape[-1]) if temperature is None else temperature
    got = xac_loss(p["tokens"], p["con"], p["owner"], torch.tensor(10.0), torch.tensor(-2.0), temperature)
    assert got.item() == pytest.approx(brute_xac(p["tokens"], p["con"], p["owner"], 10.0, -2.0, t), rel=1e-5)


def test_xac_chunks_give_the_same_loss_and_gradients(problem):
    p = problem
    results = []
    for chunk in (1 << 24, 5 * 7 * 2):  # one chunk; chunks of two concepts, recomputed in backward
        tokens, con = p["tokens"].clone().requires_grad_(), p["con"].clone().requires_grad_()
        loss = xac_loss(tokens, con, p["owner"], 10.0, -2.0, chunk_elements=chunk)
        loss.backward()
        results.append((loss.item(), tokens.grad, con.grad))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-6)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-6) and torch.allclose(results[0][2], results[1][2], atol=1e-6)


def test_no_concepts_gives_zero_loss_with_a_graph(problem):
    p = problem
    img = p["img"].clone().requires_grad_()
    for loss in (
        npc_loss(img, p["con"][:0], p["owner"][:0], 10.0, -2.0),
        xac_loss(p["tokens"].requires_grad_(), p["con"][:0], p["owner"][:0], 10.0, -2.0),
    ):
        assert loss.item() == 0.0
        loss.backward()


@pytest.mark.parametrize("name", ["compclip-tiny-siglip", "compclip-tiny-clip"])
def test_visual_tokens_pooled_is_encode_image(name):
    model, _, _ = load_model(name)
    images = torch.randn(3, 3, 64, 64)
    with torch.no_grad():
        pooled, tokens = visual_token_embeddings(model, images)
        assert torch.equal(pooled, model.encode_image(images))
    assert tokens.shape == (3, 64, 64)


def test_visual_tokens_follow_the_attention_pool_value_path():
    """With one head and the head's MLP silenced, the pooled vector is the attention-weighted mean
    of the tokens, the weights computed here from the head's query and keys."""
    model, _, _ = load_model("compclip-tiny-siglip")
    head = model.visual.trunk.attn_pool
    width = head.proj.in_features
    head.num_heads, head.head_dim, head.scale = 1, width, width**-0.5
    with torch.no_grad():
        head.mlp.fc2.weight.zero_()
        head.mlp.fc2.bias.zero_()
        images = torch.randn(2, 3, 64, 64)
        pooled, tokens = visual_token_embeddings(model, images)
        features = model.visual.trunk.forward_features(images)
        q = head.q(head.latent)[0, 0]
        k = head.kv(features)[..., :width]
        attn = (k @ q / math.sqrt(width)).softmax(-1)
        assert torch.allclose(pooled, torch.einsum("bm,bmd->bd", attn, tokens), atol=1e-5)
        assert not torch.allclose(tokens[:, 0], tokens[:, 1])


def test_the_attention_pool_value_path_is_recomputed_in_the_backward_pass():
    """Every token through the MAP head's MLP kept two (B, M, 4 × width) tensors for the backward pass, about 1 GiB at
    ViT-B-16's batch of 256: training recomputes the token path instead, so it keeps no more of them than encode_image
    (the trunk's own blocks), and its gradients are those of the path kept."""
    from test_occlip import kept_while

    torch.manual_seed(0)
    model, _, _ = load_model("compclip-tiny-siglip")
    hidden = model.visual.trunk.attn_pool.mlp.fc1.out_features
    images = torch.randn(2, 3, 64, 64)

    def hidden_layers_kept(forward):
        out, kept = kept_while(forward)
        return out, sum(shape == (2, 64, hidden) for shape, _ in kept)

    _, pooled_path = hidden_layers_kept(lambda: model.encode_image(images))
    (_, tokens), token_path = hidden_layers_kept(lambda: visual_token_embeddings(model, images))
    assert pooled_path > 0 and token_path == pooled_path
    weights = torch.randn_like(tokens)
    grads = torch.autograd.grad((tokens * weights).sum(), list(model.visual.parameters()), allow_unused=True)
    kept = _timm_tokens(model.visual, model.visual.trunk.forward_features(images))  # the path kept, not recomputed
    torch.testing.assert_close(kept, tokens)
    expected = torch.autograd.grad((kept * weights).sum(), list(model.visual.parameters()), allow_unused=True)
    for got, want in zip(grads, expected, strict=True):
        assert (got is None) == (want is None)
        if got is not None:
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize("name", ["compclip-tiny-siglip", "compclip-tiny-clip"])
def test_text_token_states_pool_to_encode_text(name):
    model, _, tokenizer = load_model(name)
    text = tokenizer(["a red couch next to a white table", "two dogs"])
    with torch.no_grad():
        pooled, states, _project = text_token_states(model, text)
        assert torch.equal(pooled, model.encode_text(text))
    assert states.shape[:2] == text.shape


def test_concept_token_spans_cover_the_phrase_tokens():
    _, _, tokenizer = load_model("compclip-tiny-clip")
    caption = "A Red couch, next to two fire-hydrants and the man's dog."
    phrases = extract([caption])[0]["noun_phrases"]
    tokens = tokenizer([caption])[0].tolist()
    inner = open_clip.SimpleTokenizer()
    for (text, _, _), span in zip(phrases, concept_token_spans(tokenizer, caption, phrases, tokens), strict=True):
        assert span is not None
        assert inner.decode(tokens[span[0] : span[1]]).replace(" ", "") == text.lower().replace(" ", "")


def test_concepts_cut_off_by_the_context_length_are_dropped():
    _, _, tokenizer = load_model("compclip-tiny-clip", force_context_length=8)
    caption = "a red couch next to a white table near a small dog"
    phrases = extract([caption])[0]["noun_phrases"]
    spans = concept_token_spans(tokenizer, caption, phrases, tokenizer([caption])[0].tolist())
    assert [t for (t, _, _), s in zip(phrases, spans, strict=True) if s is not None] == ["a red couch"]  # SOT + 6 tokens + EOT


def test_span_embeddings_match_a_loop():
    states = torch.randn(3, 9, 4)
    owner, spans = torch.tensor([0, 2, 2, 1]), torch.tensor([[1, 3], [0, 9], [4, 5], [2, 7]])
    expected = torch.stack([states[i, a:b].mean(0) for i, (a, b) in zip(owner.tolist(), spans.tolist(), strict=True)])
    assert torch.allclose(span_embeddings(states, owner, spans), expected, atol=1e-6)


def concept_store(captions):
    return {r["caption"]: r for r in extract(captions)}


CAPTIONS = ["a red couch next to a white table", "a man riding a horse", "something nice", "two dogs on a bed"]


@pytest.mark.parametrize("mode", ["span", "separate"])
def test_c2lip_method_terms_and_inference_unchanged(mode):
    model, _, tokenizer = load_model("compclip-tiny-siglip")
    plain = open_clip.create_model("compclip-tiny-siglip").eval()
    plain.load_state_dict(model.state_dict())
    method = build_method("c2lip", concepts=concept_store(CAPTIONS), concept_mode=mode)
    assert list(method.parameters()) == []  # xac and npc add no parameters
    samples = [{"image": torch.randn(3, 64, 64), "caption": c} for c in CAPTIONS]
    batch = method.collate(samples, tokenizer)
    assert batch["concept_image"].tolist() == [0, 0, 1, 1, 3, 3]  # "something nice" has no noun phrase
    out = method.outputs(model, batch)
    terms = method(out)
    assert set(terms) == {"siglip", "npc", "xac"} and all(torch.isfinite(v) for v in terms.values())
    with torch.no_grad():
        ours, theirs = model(batch["image"], batch["text"]), plain(batch["image"], batch["text"])
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


@pytest.mark.parametrize("name", ["compclip-tiny-siglip", "compclip-tiny-clip"])
def test_xac_gradients_reach_the_last_vit_block(name):
    model, _, tokenizer = load_model(name)
    method = build_method("c2lip", concepts=concept_store(CAPTIONS), lambda_npc=0.0)
    batch = method.collate([{"image": torch.randn(3, 64, 64), "caption": c} for c in CAPTIONS], tokenizer)
    method(method.outputs(model.train(), batch))["xac"].backward()
    blocks = model.visual.trunk.blocks if hasattr(model.visual, "trunk") else model.visual.transformer.resblocks
    grads = [p.grad for p in blocks[-1].parameters()]
    assert all(g is not None for g in grads) and sum(g.abs().sum() for g in grads) > 0


def test_concept_attention_is_the_xac_softmax():
    model, _, tokenizer = load_model("compclip-tiny-siglip")
    images = torch.randn(2, 3, 64, 64)
    from compclip.methods.c2lip import concept_attention

    attn = concept_attention(model, tokenizer, images, "a black sweater")
    with torch.no_grad():
        _, tokens = visual_token_embeddings(model, images)
        c = F.normalize(model.encode_text(tokenizer(["a black sweater"])), dim=-1)[0]
        for i in range(2):
            scores = torch.tensor([float(tokens[i, m] @ c) / 8.0 for m in range(64)])  # √D = 8
            assert torch.allclose(attn[i], scores.softmax(0), atol=1e-6)


def test_attention_command_draws_two_models_and_their_difference(tmp_path, capsys):
    from PIL import Image

    from compclip.models import save_checkpoint
    from conftest import run_main, shared_data

    image = sorted(shared_data("flickr8k_1k", "images").glob("*.jpg"))[0]
    model, _, _ = load_model("compclip-tiny-siglip")
    save_checkpoint(model, tmp_path / "ckpt")
    code, _, err = run_main(capsys, "-q", "attention", "--model", "compclip-tiny-siglip", "--compare", tmp_path / "ckpt", "--image", image,
                            "--concept", "a child in a pink dress", "--out", tmp_path / "map.png")
    assert code == 0, err[-2000:]
    with Image.open(tmp_path / "map.png") as png:
        assert png.width > 3 * png.height  # four panels side by side


@pytest.mark.parametrize("change, said", [
    ({"--image": "bad.png"}, "error: {bad}: not an image PIL can read (UnidentifiedImageError: cannot identify image file "),
    ({"--image": "."}, "error: --image .: a folder, not an image file"),
    ({"--concept": "  "}, 'error: --concept is empty: give the words to look for, e.g. "black sweater"'),
    ({"--temperature": "0"}, "error: --temperature 0.0: must be above 0 (the similarities are divided by it)"),
    ({"--temperature": "-1"}, "error: --temperature -1.0: must be above 0"),
])
def test_attention_refuses_what_it_cannot_draw_in_one_line(tmp_path, capsys, monkeypatch, change, said):
    """A file that is not an image was a PIL traceback; an empty concept, and a temperature of 0 (a NaN map) or below
    (the map inverted), were drawn without a word."""
    from PIL import Image

    from conftest import run_main

    monkeypatch.chdir(tmp_path)
    Image.new("RGB", (40, 30), (200, 30, 30)).save("red.png")
    (tmp_path / "bad.png").write_bytes(b"not a png")
    options = {"--model": "compclip-tiny-siglip", "--image": "red.png", "--concept": "red", "--out": "map.png"} | change
    code, _, err = run_main(capsys, "attention", *[item for pair in options.items() for item in pair])
    assert code == 2 and err.splitlines()[-1].startswith(said.format(bad="bad.png")), err
    assert not (tmp_path / "map.png").exists()


def test_short_text_encoder_equals_encode_text():
    from compclip.models.tokens import short_text_encoder

    model, _, tokenizer = load_model("compclip-tiny-clip")
    text = tokenizer(["a dog", "a red couch next to a white table in a bright room", "two"])
    with torch.no_grad():
        assert torch.allclose(short_text_encoder(model)(text), model.encode_text(text), atol=1e-5)
    siglip, _, _ = load_model("compclip-tiny-siglip")
    assert short_text_encoder(siglip) is None  # attends both ways: padding matters


def test_a_batch_of_short_and_long_texts_is_encoded_in_two_groups_with_the_same_features_and_gradients():
    """Statements beside descriptions (the binding world's captions): each group cut after its own longest, the features
    and every gradient those of `encode_text` over the whole context."""
    from compclip.models.tokens import encode_short_texts, length_groups

    lengths = torch.tensor([12, 33, 11, 31, 12, 30])
    short, long = length_groups(lengths)
    assert sorted(short.tolist()) == [0, 2, 4] and sorted(long.tolist()) == [1, 3, 5]
    assert len(length_groups(torch.tensor([30, 31, 33, 29]))) == 1  # a second group would save too little
    model, _, tokenizer = load_model("compclip-tiny-world")
    captions = ["a red square above a blue star", "There is a small red square and a large blue star. The red square is above the blue "
                "star.", "a pink cross to the left of a black circle", "We see a large green hexagon and a small white diamond."]
    text = tokenizer(captions)
    grads = []
    for encode in (lambda t: encode_short_texts(model, t), model.encode_text):
        model.zero_grad()
        features = encode(text)
        (features * torch.linspace(-1, 1, features.numel()).view_as(features)).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.text.named_parameters() if p.grad is not None})
        grads[-1]["features"] = features.detach()
    assert grads[0].keys() == grads[1].keys()
    for name, grad in grads[0].items():  # float rounding of matrices of other shapes
        assert torch.allclose(grad, grads[1][name], rtol=1e-4, atol=1e-5 * float(grad.abs().max())), name


def test_rows_padded_for_a_gpu_leave_every_texts_features_and_gradients():
    """Off the CPU `encode_short_texts` pads a token field's rows up to a multiple of GPU_ROWS with copies of its first text
    and drops their features: the real texts' features and every gradient are those of the rows as given."""
    from compclip.models.tokens import GPU_ROWS, encode_short_texts, pad_rows

    model, _, tokenizer = load_model("compclip-tiny-clip")
    text = tokenizer(["a red couch", "two dogs and a cat beside a long white table", "a white table"])
    padded = pad_rows(text, GPU_ROWS)
    assert padded.shape == (GPU_ROWS, text.shape[1]) and torch.equal(padded[:3], text)
    assert torch.equal(padded[3:], text[:1].expand(GPU_ROWS - 3, -1))
    assert pad_rows(text[:0], GPU_ROWS).shape[0] == 0 and pad_rows(padded, GPU_ROWS) is padded
    results = []
    for rows in (text, padded):
        model.zero_grad()
        features = encode_short_texts(model, rows)[:3]
        (features * torch.linspace(-1, 1, features.numel()).view_as(features)).sum().backward()
        results.append({"features": features.detach(), **{n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}})
    assert results[0].keys() == results[1].keys()
    for name, value in results[0].items():
        # float rounding of matrices of other shapes
        torch.testing.assert_close(results[1][name], value, rtol=1e-4, atol=1e-5 * float(value.abs().max()), msg=name)


# ---- spans on the tokenizers the models use, and each loss term through the method's own outputs ---------------------

TRICKY = [
    'A Red couch, next to a "white" table; two dogs and 3 cats.',
    "The man's hat: a tall, blue one -- near Café Über's door.",
    "a red couch",
    "Two CHILDREN play with a ball in the park , and a dog watches .",
]


@pytest.mark.parametrize("name", ["compclip-tiny-clip", "compclip-tiny-siglip-hf"])
def test_every_phrase_is_found_in_the_tokens_the_model_sees(name):
    """The CLIP BPE lower-cases; the SigLIP-style tokenizer (open_clip's HFTokenizer, clean="canonicalize") also drops
    punctuation: each phrase's span must still be found, and hold the phrase's own tokens."""
    from open_clip.tokenizer import HFTokenizer

    _, _, tokenizer = load_model(name)
    inner = tokenizer._build()
    records = extract(TRICKY)
    for caption, record in zip(TRICKY, records, strict=True):
        tokens = tokenizer([caption])[0].tolist()
        spans = concept_token_spans(tokenizer, caption, record["noun_phrases"], tokens)
        assert record["noun_phrases"] and all(s is not None for s in spans), (caption, record["noun_phrases"], spans)
        for (text, _, _), (a, b) in zip(record["noun_phrases"], spans, strict=True):
            if isinstance(inner, HFTokenizer):  # the span holds what the tokenizer makes of the cleaned phrase
                assert tokens[a:b] == inner.tokenizer(inner.clean_fn(text), add_special_tokens=False)["input_ids"], text
            else:
                assert open_clip.SimpleTokenizer().decode(tokens[a:b]).replace(" ", "") == text.lower().replace(" ", "")


def test_the_siglip_style_model_tokenizes_as_open_clip_s_hf_tokenizer():
    from open_clip.tokenizer import HFTokenizer

    from compclip.models import bundled

    _, _, tokenizer = load_model("compclip-tiny-siglip-hf")
    reference = HFTokenizer(str(bundled.wordpiece_folder()), context_length=64, clean="canonicalize")
    assert torch.equal(tokenizer(TRICKY), reference(TRICKY))
    words = reference.tokenizer.convert_ids_to_tokens(reference(["A Red couch, next to a white-ish table!"])[0].tolist())
    assert words[:12] == ["a", "red", "couch", "next", "to", "a", "white", "##i", "##s", "##h", "table", "</s>"]


def brute_siglip(image, text, scale, bias):
    return sum(math.log1p(math.exp(-(1.0 if i == j else -1.0) * (scale * float(image[i] @ text[j]) + bias)))
               for i in range(image.shape[0]) for j in range(text.shape[0])) / text.shape[0]


@pytest.mark.parametrize("xac_attention", ["scaled", "cosine"])
def test_c2lip_terms_are_their_formulas_of_the_method_outputs(xac_attention):
    """Each term recomputed from the same output tensors: SigLIP by open_clip's SigLipLoss and a double loop, L_npc and
    L_xac by double loops, each times its own λ (swapped λs or features would not pass)."""
    model, _, tokenizer = load_model("compclip-tiny-siglip-hf")
    method = build_method("c2lip", concepts=concept_store(CAPTIONS), lambda_npc=2.0, lambda_xac=0.5, xac_attention=xac_attention)
    batch = method.collate([{"image": torch.randn(3, 64, 64), "caption": c} for c in CAPTIONS], tokenizer)
    assert batch["coverage"].tolist() == [3, 4] and batch["uncovered"] == "something nice"
    with torch.no_grad():
        out = method.outputs(model, batch)
        terms = method(out)
    scale, bias = out["logit_scale"].item(), out["logit_bias"].item()
    image, text, concepts, owner = out["image_features"], out["text_features"], out["concept_features"], out["concept_image"]
    reference = open_clip.loss.SigLipLoss()(image, text, out["logit_scale"], out["logit_bias"])
    assert terms["siglip"].item() == pytest.approx(reference.item(), rel=1e-5)
    assert terms["siglip"].item() == pytest.approx(brute_siglip(image, text, scale, bias), rel=1e-5)
    assert terms["npc"].item() == pytest.approx(2.0 * brute_npc(image, concepts, owner, scale, bias), rel=1e-5)
    tokens = F.normalize(out["visual_tokens"], dim=-1) if xac_attention == "cosine" else out["visual_tokens"]
    temperature = 1.0 if xac_attention == "cosine" else math.sqrt(tokens.shape[-1])  # released code: smooth=1 on unit tokens
    assert terms["xac"].item() == pytest.approx(0.5 * brute_xac(tokens, concepts, owner, scale, bias, temperature), rel=1e-5)


@pytest.mark.parametrize("mode", ["span", "separate"])
def test_concept_features_are_unit_vectors_of_the_towers_own_features(mode):
    """c_k is L2-normalised (docs/methods.md §1): each concept feature has norm 1, and in `separate` mode it is exactly
    open_clip's `encode_text(phrase, normalize=True)`; in `span` mode the caption's own states pooled over the phrase and
    projected, written out here with the tower's own modules."""
    model, _, tokenizer = load_model("compclip-tiny-siglip-hf")
    method = build_method("c2lip", concepts=concept_store(CAPTIONS), concept_mode=mode)
    batch = method.collate([{"image": torch.randn(3, 64, 64), "caption": c} for c in CAPTIONS], tokenizer)
    with torch.no_grad():
        concepts = method.outputs(model.eval(), batch)["concept_features"]
        assert concepts.shape[0] == batch["concept_image"].shape[0] >= 4
        assert torch.allclose(concepts.norm(dim=-1), torch.ones(concepts.shape[0]), atol=1e-5)
        phrases = [p for c in CAPTIONS for p, _, _ in concept_store(CAPTIONS)[c]["noun_phrases"]]
        if mode == "separate":
            reference = model.encode_text(tokenizer(phrases), normalize=True)
        else:  # the final norm's output inside open_clip's own encode_text, caught by a hook
            caught = []
            hook = model.text.ln_final.register_forward_hook(lambda _m, _i, out: caught.append(out))
            model.encode_text(batch["text"])
            hook.remove()
            pooled = torch.stack([caught[0][i, start:end].mean(0) for i, (start, end) in
                                  zip(batch["concept_image"].tolist(), batch["concept_span"].tolist(), strict=True)])
            projection = model.text.text_projection
            reference = F.normalize(projection(pooled) if isinstance(projection, torch.nn.Module) else pooled @ projection, dim=-1)
    assert torch.allclose(concepts, reference, atol=1e-5)


def test_a_caption_without_a_noun_phrase_is_its_own_concept_when_asked():
    _, _, tokenizer = load_model("compclip-tiny-siglip-hf")
    samples = [{"image": torch.randn(3, 64, 64), "caption": c} for c in CAPTIONS]
    for mode in ("span", "separate"):
        method = build_method("c2lip", concepts=concept_store(CAPTIONS), concept_mode=mode, caption_concept=True)
        batch = method.collate(samples, tokenizer)
        assert batch["concept_image"].tolist() == [0, 0, 1, 1, 2, 3, 3] and batch["coverage"].tolist() == [4, 4]
    assert torch.equal(batch["concept_text"][4], tokenizer(["something nice"])[0])  # separate: the whole caption as its own text
    with pytest.raises(ValueError, match="xac_attention must be one of scaled, cosine"):
        build_method("c2lip", concepts=concept_store(CAPTIONS), xac_attention="uniform")
    default = build_method("c2lip", concepts=concept_store(CAPTIONS)).parts[-1]
    assert default.xac_attention == "cosine"  # the released code's, which the paper's numbers were trained with


def test_training_encodes_captions_cut_after_the_longest_as_encode_text_would():
    """Every method's forward reads the captions through `encode_short_texts`: on a causal tower the features equal
    `encode_text` over the whole context, also where the batch's captions differ in length."""
    model, _, tokenizer = load_model("compclip-tiny-clip")
    captions = ["a star", "a small red square to the left of a large blue circle in a photo"]
    text = tokenizer(captions)
    out = build_method("siglip").outputs(model, {"image": torch.zeros(2, 3, 64, 64), "text": text})
    assert int(text.argmax(-1).max()) + 1 < text.shape[1]  # the cut is real
    assert torch.allclose(out["text_features"], F.normalize(model.encode_text(text), dim=-1), atol=1e-5)


def test_attribute_swaps_exchange_modifiers_between_a_captions_phrases():
    assert attribute_swaps(["a red square", "a blue circle"]) == [(0, "a blue square"), (1, "a red circle")]
    assert attribute_swaps(["a small white star", "a large black cross"]) == [(0, "a large black star"), (1, "a small white cross")]
    assert attribute_swaps(["a red square", "the square"]) == []  # no modifiers on one side, and one head
    assert attribute_swaps(["a red square", "a red circle"]) == []  # the same modifiers: a swap changes nothing
    # "a blue square" is the caption's own phrase, no negative; the two squares share a head, the blue ones modifiers
    assert attribute_swaps(["a red square", "a blue circle", "a blue square"]) == [(1, "a red circle")]


def test_swap_negatives_add_each_to_its_own_images_npc_term():
    """npc_negatives=swap_attributes: L_npc plus, for each swapped phrase, −log σ(−(τ v·n + b)) against its own image alone,
    over the same 𝒦, recomputed by a loop from the method's outputs; the swapped texts encode as open_clip encodes them."""
    model, _, tokenizer = load_model("compclip-tiny-siglip-hf")
    captions = ["a red couch next to a white table", "two dogs and a cat", "a large blue cube on a small green ball"]
    store = concept_store(captions)
    method = build_method("c2lip", concepts=store, npc_negatives="swap_attributes", lambda_npc=2.0)
    batch = method.collate([{"image": torch.randn(3, 64, 64), "caption": c} for c in captions], tokenizer)
    phrases = [[p for p, _, _ in store[c]["noun_phrases"]] for c in captions]
    expected = [(i, text) for i, ps in enumerate(phrases) for _, text in attribute_swaps(ps)]
    assert [e for e in expected if e[0] == 0] == [(0, "a white couch"), (0, "a red table")]
    assert batch["swap_image"].tolist() == [i for i, _ in expected]
    with torch.no_grad():
        out = method.outputs(model.eval(), batch)
        terms = method(out)
        reference = model.encode_text(tokenizer([t for _, t in expected]), normalize=True)
    assert torch.allclose(out["swap_features"], reference, atol=1e-5)
    scale, bias = out["logit_scale"].item(), out["logit_bias"].item()
    image, concepts, owner = out["image_features"], out["concept_features"], out["concept_image"]
    swaps = sum(math.log1p(math.exp(scale * float(image[i] @ n) + bias)) for (i, _), n in zip(expected, out["swap_features"], strict=True))
    npc = brute_npc(image, concepts, owner, scale, bias) + swaps / concepts.shape[0]
    assert terms["npc"].item() == pytest.approx(2.0 * npc, rel=1e-5)
    plain = build_method("c2lip", concepts=store, lambda_npc=2.0)
    with torch.no_grad():
        assert method(out)["npc"] > plain(out)["npc"]  # the same outputs, one more sum of positive terms
    with pytest.raises(ValueError, match="npc_negatives must be one of none, swap_attributes"):
        build_method("c2lip", concepts=store, npc_negatives="all")


def test_modified_phrases_keep_the_phrases_whose_head_has_a_modifier():
    """concept_phrases=modified, from spaCy's POS tags: "a red square" and "a tennis ball" stay, "The picture" and "two
    dogs" go; the method's concepts are exactly those phrases, and a store without POS tags is refused before training."""
    captions = ["The picture shows a red square and a tennis ball.", "two dogs on a green bed"]
    records = extract(captions, ("noun_phrases", "pos"))
    kept = [[p[0] for p in modified_phrases(r["noun_phrases"], r["pos"])] for r in records]
    phrases = [[p[0] for p in r["noun_phrases"]] for r in records]
    assert phrases == [["The picture", "a red square", "a tennis ball"], ["two dogs", "a green bed"]]
    assert kept == [["a red square", "a tennis ball"], ["a green bed"]]
    _, _, tokenizer = load_model("compclip-tiny-siglip")
    store = {r["caption"]: r for r in records}
    samples = [{"image": torch.randn(3, 64, 64), "caption": c} for c in captions]
    for mode in ("span", "separate"):
        batch = build_method("c2lip", concepts=store, concept_phrases="modified", concept_mode=mode).collate(samples, tokenizer)
        assert batch["concept_image"].tolist() == [0, 0, 1]
        everything = build_method("c2lip", concepts=store, concept_mode=mode).collate(samples, tokenizer)
        assert everything["concept_image"].tolist() == [0, 0, 0, 1, 1]
    with pytest.raises(ValueError, match="concept_phrases=modified reads POS tags"):
        build_method("c2lip", concepts=concept_store(captions), concept_phrases="modified").collate(samples, tokenizer)
    with pytest.raises(ValueError, match="concept_phrases must be one of all, modified"):
        build_method("c2lip", concepts=store, concept_phrases="adjectives")
