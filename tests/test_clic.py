"""CLIC: the cross-sentence POS swap by its rule, image pairs joined in the recorded order, the four
losses against brute-force loops, and a real `compclip train --method clic` with the vision tower frozen."""
import json
import math
import random
import subprocess

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from compclip.concepts import extract
from compclip.methods import build_method
from compclip.methods.clic import CLICPart, Options, cross_sentence_swap
from compclip.methods.text import join_sentences
from compclip.models import load_model
from compclip.text import sentences
from conftest import run_main

TAGGED = {r["caption"]: r["pos"] for r in extract(["a red car", "a blue bus", "a red bus"], "pos")}  # spaCy, once


def swaps(a, b, seeds=range(40)):
    return {cross_sentence_swap(a, TAGGED[a], b, TAGGED[b], random.Random(s)) for s in seeds}


def test_swap_exchanges_one_word_of_the_same_pos_tag():
    # ADJ red<->blue or NOUN car<->bus; never the determiners
    assert swaps("a red car", "a blue bus") == {("a blue car", "a red bus"), ("a red bus", "a blue car")}


def test_swap_never_exchanges_a_word_both_sentences_hold():
    assert swaps("a red car", "a red bus") == {("a red bus", "a red car")}


def test_swap_keeps_the_sentence_initial_capital_in_place():
    dogs = [("Dogs", 0, 4, "NOUN"), ("run", 5, 8, "VERB"), (".", 8, 9, "PUNCT")]
    cats = [("I", 0, 1, "PRON"), ("see", 2, 5, "VERB"), ("cats", 6, 10, "NOUN"), (".", 10, 11, "PUNCT")]
    made = {cross_sentence_swap("Dogs run.", dogs, "I see cats.", cats, random.Random(s)) for s in range(40)}
    assert made == {("Cats run.", "I see dogs."), ("Dogs see.", "I run cats.")}


def test_swap_falls_back_to_two_random_words_or_none():
    a, b = "big", "dogs"
    assert cross_sentence_swap(a, [("big", 0, 3, "ADJ")], b, [("dogs", 0, 4, "NOUN")], random.Random(0)) == ("dogs", "big")
    same = [("the", 0, 3, "DET")]
    assert cross_sentence_swap("the", same, "the", same, random.Random(0)) is None


def test_swap_replaces_every_occurrence_of_the_two_words_as_the_authors_do():
    """The authors' swap_words_between_texts substitutes every whole-word match; `every=False` the drawn token alone."""
    a = [("The", 0, 3, "DET"), ("dog", 4, 7, "NOUN"), ("sees", 8, 12, "VERB"), ("a", 13, 14, "DET"), ("dog", 15, 18, "NOUN"),
         (".", 18, 19, "PUNCT")]
    b = [("A", 0, 1, "DET"), ("cat", 2, 5, "NOUN"), ("sleeps", 6, 12, "VERB"), (".", 12, 13, "PUNCT")]
    made = {cross_sentence_swap("The dog sees a dog.", a, "A cat sleeps.", b, random.Random(s)) for s in range(40)}
    assert made == {("The cat sees a cat.", "A dog sleeps."), ("The dog sleeps a dog.", "A cat sees.")}
    one = {cross_sentence_swap("The dog sees a dog.", a, "A cat sleeps.", b, random.Random(s), every=False) for s in range(40)}
    assert ("The cat sees a dog.", "A dog sleeps.") in one and ("The dog sees a cat.", "A dog sleeps.") in one


def test_sentences_and_joining():
    text = "A red cube.  Two stars!It is blue"
    assert [text[s:e] for s, e in sentences(text)] == ["A red cube.", "Two stars!", "It is blue"]
    assert join_sentences("a red cube", "two stars. ") == "a red cube. two stars."


CAPTIONS = [
    "A red cube sits on a table. The room is dark. A lamp glows.",
    "Two green balls roll. A child watches.",
    "A yellow star hangs on the wall.",
    "A blue car parks near a tree. The sky is clear.",
]
SIZES = [(40, 80), (90, 50), (30, 60), (70, 70)]  # portrait, landscape, portrait, square (landscape)
COLOURS = [(220, 40, 40), (40, 170, 60), (240, 210, 40), (40, 80, 220)]


@pytest.fixture(scope="module")
def setup():
    model, _, tokenizer = load_model("compclip-tiny-clip")
    records = {r["caption"]: r for r in extract(CAPTIONS, "noun-phrases,pos")}
    method = build_method("clic", concepts=records, partner="batch")  # partners from the batch; the default's own tests below
    transform = method.image_transform(model)
    samples = [
        {**transform(Image.new("RGB", size, colour)), "caption": c} for size, colour, c in zip(SIZES, COLOURS, CAPTIONS, strict=True)
    ]
    return model, tokenizer, method, samples, method.collate(samples, tokenizer)


def test_pairs_share_orientation_and_keep_the_recorded_order(setup):
    model, _, _, _samples, batch = setup
    cfg = model.visual.preprocess_cfg
    mean, std = torch.tensor(cfg["mean"])[:, None, None], torch.tensor(cfg["std"])[:, None, None]
    assert batch["pair_image"].shape == batch["image"].shape == (4, 3, 64, 64)
    for i, (a, b) in enumerate(batch["pair_order"].tolist()):
        assert i in (a, b) and a != b
        portrait = SIZES[a][1] > SIZES[a][0]
        assert portrait == (SIZES[b][1] > SIZES[b][0])
        halves = batch["pair_image"][i].chunk(2, dim=2 if portrait else 1)  # left|right or top/bottom
        for half, k in zip(halves, (a, b), strict=True):
            expected = (torch.tensor(COLOURS[k], dtype=torch.float32)[:, None, None] / 255 - mean) / std
            assert torch.allclose(half, expected.expand_as(half), atol=1e-5), (i, k)


def test_positives_and_negative_follow_the_rule(setup):
    _, _, _, _, batch = setup
    first = [c[slice(*sentences(c)[0])] for c in CAPTIONS]
    for i, ((a, b), positives) in enumerate(zip(batch["pair_order"].tolist(), batch["positives"], strict=True)):
        m = b if a == i else a
        assert positives[:2] == [join_sentences(first[i], first[m]), join_sentences(first[m], first[i])]
        for p in positives[2:]:  # another sentence of each (the only one for one-sentence captions), either order
            parts = [p[s:e] for s, e in sentences(p)]
            owners = sorted(k for part in parts for k in (i, m) if part in [CAPTIONS[k][s:e] for s, e in sentences(CAPTIONS[k])])
            assert len(parts) == 2 and owners == sorted((i, m))
    owners = batch["negative_image"].tolist()
    assert owners == [0, 1, 2, 3]
    for i, negative in zip(owners, batch["negatives"], strict=True):
        new = negative.split()

        def changed(positive, new=new):
            old = positive.split()
            return [j for j in range(len(old)) if old[j] != new[j]] if len(old) == len(new) else []

        # the two sentences in random order: the negative is p1's or p2's order with one word of each exchanged
        k = next(k for k, positive in enumerate(batch["positives"][i][:2]) if len(changed(positive)) == 2)
        old, (a, b) = batch["positives"][i][k].split(), changed(batch["positives"][i][k])
        m = next(x for x in batch["pair_order"][i].tolist() if x != i)
        assert a < len((first[i] if k == 0 else first[m]).split()) <= b  # one word in each sentence
        assert new[a].strip(".").lower() == old[b].strip(".").lower() and new[b].strip(".").lower() == old[a].strip(".").lower()


def test_the_negative_joins_its_two_sentences_in_random_order():
    """As the authors' get_hard_negative (random.shuffle of the two swapped sentences)."""
    records = {r["caption"]: r for r in extract(CAPTIONS[:2], "noun-phrases,pos")}
    loss = CLICPart()
    parsed = [([c[s:e] for s, e in sentences(c)], sentences(c)[0], records[c]) for c in CAPTIONS[:2]]
    firsts = {loss.texts(0, 1, parsed, random.Random(seed))[2].split(".")[0].split()[-1] for seed in range(40)}
    assert len(firsts) >= 2  # the last word of the negative's first sentence comes from either caption


def test_a_batch_with_one_portrait_image_pairs_it_in_its_own_shape(setup):
    """A micro-batch may hold a single image of an orientation: its partner, of the other, is joined in its shape."""
    model, tokenizer, method, samples, _ = setup
    one = [samples[0], samples[1], samples[3]]  # one portrait, two landscape
    batch = method.collate(one, tokenizer)
    cfg = model.visual.preprocess_cfg
    mean, std = torch.tensor(cfg["mean"])[:, None, None], torch.tensor(cfg["std"])[:, None, None]
    colours = [COLOURS[0], COLOURS[1], COLOURS[3]]
    for i, (a, b) in enumerate(batch["pair_order"].tolist()):
        portrait = a == 0  # the first image's shape decides
        halves = batch["pair_image"][i].chunk(2, dim=2 if portrait else 1)
        for half, k in zip(halves, (a, b), strict=True):
            expected = (torch.tensor(colours[k], dtype=torch.float32)[:, None, None] / 255 - mean) / std
            assert torch.allclose(half, expected.expand_as(half), atol=1e-5), (i, k)
    assert 0 in batch["pair_order"][0].tolist() and sorted(batch["pair_order"][0].tolist()) != [0, 0]


def brute_force_clic(image, positives, negatives, owners, scale):
    """L_Cont, L_S-Neg, L_Uni written out with Python floats."""
    n = len(image)
    sim = lambda x, y: scale * sum(p * q for p, q in zip(x, y, strict=True))  # noqa: E731
    cont = 0.0
    for k in range(4):
        texts = [positives[j][k] for j in range(n)]
        for i in range(n):
            row = [sim(image[i], t) for t in texts]
            col = [sim(texts[i], im) for im in image]
            cont += (math.log(sum(map(math.exp, row))) - row[i] + math.log(sum(map(math.exp, col))) - col[i]) / (2 * n)
    cont /= 4
    sneg = 0.0
    for neg, i in zip(negatives, owners, strict=True):
        for k in range(4):
            p, q = sim(image[i], positives[i][k]), sim(image[i], neg)
            sneg += -math.log(math.exp(p) / (math.exp(p) + math.exp(q))) / 4
    uni = sum(math.dist(positives[i][0], positives[i][1]) ** 2 for i in range(n))  # squared, as the authors' losses.py
    return cont, sneg / n, uni / n


def test_losses_equal_brute_force():
    g = torch.Generator().manual_seed(0)
    unit = lambda *s: F.normalize(torch.randn(*s, generator=g, dtype=torch.float64), dim=-1)  # noqa: E731
    image, positives, negatives = unit(5, 8), unit(5, 4, 8), unit(4, 8)
    owners = torch.tensor([0, 1, 3, 4])  # image 2 has no negative
    out = {"image_features": image, "text_features": positives[:, 0], "positive_features": positives[:, 1:],
           "negative_features": negatives, "negative_image": owners, "logit_scale": torch.tensor(6.0, dtype=torch.float64)}
    terms = CLICPart()(out)
    cont, sneg, uni = brute_force_clic(image.tolist(), positives.tolist(), negatives.tolist(), owners.tolist(), 6.0)
    assert terms["cont"].item() == pytest.approx(0.5 * cont, rel=1e-12)
    assert terms["sneg"].item() == pytest.approx(0.5 * sneg, rel=1e-12)
    assert terms["uni"].item() == pytest.approx(uni, rel=1e-12)
    plain = CLICPart(Options(uni_distance="l2"))(out)["uni"].item()
    assert plain == pytest.approx(sum(math.dist(*positives[i, :2].tolist()) for i in range(5)) / 5, rel=1e-12)


def test_odd_steps_are_plain_clip_steps_on_single_images(setup):
    import open_clip

    model, _, method, _, batch = setup
    with torch.no_grad():
        method.begin_step(1)
        out = method.outputs(model, batch)
        terms = method(out)
        reference = open_clip.ClipLoss()(F.normalize(model.encode_image(batch["image"]), dim=-1),
                                         F.normalize(model.encode_text(batch["first_text"]), dim=-1), model.logit_scale.exp())
        method.begin_step(2)
        pair = method(method.outputs(model, batch))
    assert terms.keys() == {"clip"} and terms["clip"].item() == pytest.approx(reference.item(), rel=1e-5)
    assert pair.keys() == {"cont", "sneg", "uni"}


def test_train_clic_freezes_the_vision_tower_and_alternates(tmp_path, capsys):
    (tmp_path / "img").mkdir()
    rows = []
    for i in range(16):
        a, b = ["red", "green", "blue", "yellow"][i % 4], ["cube", "ball", "star", "ring"][i // 4]
        Image.new("RGB", (48 + 16 * (i % 2), 56), COLOURS[i % 4]).save(tmp_path / "img" / f"{i}.png")
        rows.append(f'img/{i}.png,"A {a} {b} lies on the floor. It is small. The light is dim."')
    data = tmp_path / "train.csv"
    data.write_text("image,caption\n" + "\n".join(rows) + "\n")
    run = lambda *args: subprocess.CompletedProcess(args, *run_main(capsys, "-q", *args))  # noqa: E731
    made = run("concepts", str(data), "--out", str(tmp_path / "concepts"), "--what", "noun-phrases,pos")
    assert made.returncode == 0, made.stderr[-2000:]
    trained = run("train", "--method", "clic", "--model", "compclip-tiny-siglip", "--train-data", str(data),
                  "--concepts", str(tmp_path / "concepts"), "--out", str(tmp_path / "run"), "--steps", "4",
                  "--batch-size", "8", "--lr", "1e-3", "--workers", "1")
    assert trained.returncode == 0, trained.stderr[-3000:]
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [sorted(k for k in r if k in ("clip", "cont", "sneg", "uni")) for r in log] == [
        ["cont", "sneg", "uni"], ["clip"], ["cont", "sneg", "uni"], ["clip"]]
    torch.manual_seed(0)
    before, _, _ = load_model("compclip-tiny-siglip")
    after, _, _ = load_model(str(tmp_path / "run" / "checkpoints" / "step_0000004"))
    b, a = before.state_dict(), after.state_dict()
    assert all(torch.equal(b[k], a[k]) for k in b if k.startswith("visual.") or k == "logit_bias")
    assert any(not torch.equal(b[k], a[k]) for k in b if k.startswith("text."))


def partner_data(root, n=12):
    """n coloured images, portrait and landscape in turn, each with its own one-line caption."""
    (root / "img").mkdir(parents=True)
    rows = []
    for i in range(n):
        size = (30, 60) if i % 2 else (60, 30)
        Image.new("RGB", size, (20 * i, 200 - 10 * i, 40)).save(root / "img" / f"{i}.png")
        rows.append(f"img/{i}.png,A picture number {i} of a shape.")
    (root / "d.csv").write_text("image,caption\n" + "\n".join(rows) + "\n")
    return root / "d.csv"


def test_the_reader_draws_each_partner_from_the_whole_data_of_the_same_orientation(tmp_path):
    """The authors' dataset draws the partner from every record (not the batch), of the image's orientation; compclip's
    draw is fixed by (seed, epoch, record), so a resumed run pairs alike."""
    from compclip.data import open_reader
    from compclip.methods.clic import PairViews

    model, _, _ = load_model("compclip-tiny-clip")
    data = partner_data(tmp_path)

    def draw(epoch=0):
        reader = open_reader(str(data), transform=PairViews(model))
        reader.partners, reader.sample_seed, reader.epoch = True, 0, epoch
        return [(s["key"], s["portrait"], s["partner"]["key"], s["partner"]["portrait"], s["partner"]["caption"]) for s in reader]

    drawn = draw()
    assert len(drawn) == 12
    assert all(key != partner and portrait == partner_portrait for key, portrait, partner, partner_portrait, _ in drawn)
    assert all(caption.startswith("A picture number") for *_, caption in drawn)
    assert len({partner for _, _, partner, _, _ in drawn}) > 3  # drawn, not a fixed neighbour
    assert draw() == drawn and draw(epoch=1) != drawn
    # each record draws from its own seeded sequence: one sequence for all would give most records of an orientation the
    # same partner (the first of that orientation it yields)
    many = partner_data(tmp_path / "many", n=40)
    reader = open_reader(str(many), transform=PairViews(model))
    reader.partners, reader.sample_seed = True, 0
    partners = [(s["portrait"], s["partner"]["key"]) for s in reader]
    for portrait in (True, False):
        assert len({key for p, key in partners if p == portrait}) >= 8, partners


def test_clic_pairs_each_image_with_its_drawn_partner(tmp_path):
    """With partners from the data (the default), image i is joined with its own partner, whose first sentence makes p1
    and p2 with i's: no row's images or positives come from another row of the batch."""
    from compclip.data import open_reader

    model, _, tokenizer = load_model("compclip-tiny-clip")
    data = partner_data(tmp_path)
    captions = [line.split(",", 1)[1] for line in data.read_text().splitlines()[1:]]
    records = {r["caption"]: r for r in extract(captions, "noun-phrases,pos")}
    method = build_method("clic", concepts=records)
    reader = open_reader(str(data), transform=method.image_transform(model))
    reader.partners, reader.sample_seed = method.wants_partners, 0
    samples = list(reader)[:6]
    batch = method.collate(samples, tokenizer)
    for i, ((a, b), positives) in enumerate(zip(batch["pair_order"].tolist(), batch["positives"], strict=True)):
        assert sorted((a, b)) == [i, 6 + i]  # the image and its partner
        partner = samples[i]["partner"]["caption"]
        assert positives[:2] == [join_sentences(samples[i]["caption"], partner), join_sentences(partner, samples[i]["caption"])]
        views = [samples[i], samples[i]["partner"]]
        halves = batch["pair_image"][i].chunk(2, dim=2 if samples[i]["portrait"] else 1)
        view = "tall" if samples[i]["portrait"] else "wide"
        for half, k in zip(halves, (a, b), strict=True):
            assert torch.equal(half, views[k // 6][view])
    with pytest.raises(ValueError, match="partner=dataset"):
        method.collate([{k: v for k, v in s.items() if k != "partner"} for s in samples], tokenizer)
