"""SVLC (`--method svlc`): its loss against the released `ClipLoss.forward` with `--vl_negs` written out as the released
code lays its tensors out, and its rule-based negatives on real COCO captions against the released rule restated."""
import json
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from compclip.concepts.svlc_lists import LISTS
from compclip.methods import CLIPLoss, SVLCLoss, build_method, rule_based_negatives
from conftest import shared_data


def released_formula(image, text, negatives, have, scale, neg_w=1.0, no_neg_in_contrastive=False):
    """The released single-process `ClipLoss.forward` (src/open_clip/loss.py) as train.py feeds it: the texts are the
    captions, then the negatives of the images in `have` (`prepare_data_for_neg_loss`), `num_negs` each; the InfoNCE
    rows of the texts cut to the captions; `get_loss_neg_only` over `have` with the caption as class 0."""
    n, num_negs = image.shape[0], negatives.shape[1]
    texts = torch.cat([text, negatives[have].reshape(-1, text.shape[1])]) if have else text
    contrastive = texts[:n] if no_neg_in_contrastive else texts
    per_image = scale * image @ contrastive.T
    per_text = (scale * texts @ image.T)[:n]
    labels = torch.arange(n)
    total = (F.cross_entropy(per_image, labels) + F.cross_entropy(per_text, labels)) / 2
    if not have:
        return total, total * 0
    pos = texts[:n][have].unsqueeze(1)
    neg = texts[n:].view(len(have), num_negs, -1)
    logits = scale * torch.matmul(torch.cat([pos, neg], dim=1), image[have].unsqueeze(2))[:, :, 0]
    loss_neg = F.cross_entropy(logits, torch.zeros(len(have), dtype=torch.long))
    return total, neg_w * loss_neg


def leaves(seed, n=6, k=2):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_() for shape in ((n, 8), (n, 8), (n, k, 8))]


@pytest.mark.parametrize(("have", "weight", "in_contrastive"), [([0, 2, 3, 5], 1.0, True), ([1, 4], 0.5, True),
                                                               ([0, 1, 2, 3, 4, 5], 1.0, False), ([], 1.0, True)])
def test_svlc_loss_is_the_released_formula_with_its_gradients(have, weight, in_contrastive):
    """Two negatives each for some images (the released files' all-or-none `num_negs`), given here in an order other
    than their images'; values and every gradient within 1e-6; a batch without a negative is the InfoNCE alone."""
    ours, theirs = leaves(len(have)), leaves(len(have))
    a = [F.normalize(x, dim=-1) for x in ours]
    b = [F.normalize(x, dim=-1) for x in theirs]
    scale = torch.tensor(20.0, dtype=torch.float64)
    owners = torch.tensor([i for i in reversed(have) for _ in range(2)], dtype=torch.long)
    slots = torch.tensor([s for _ in have for s in (1, 0)], dtype=torch.long)
    terms = SVLCLoss(weight, in_contrastive)(a[0], a[1], a[2][owners, slots], owners, scale)
    total, negative = released_formula(b[0], b[1], b[2], have, scale, weight, not in_contrastive)
    assert terms.keys() == {"svlc", "svlc_negative"}
    assert torch.allclose(terms["svlc"], total, atol=1e-6, rtol=0) and torch.allclose(terms["svlc_negative"], negative, atol=1e-6, rtol=0)
    assert (float(negative.detach()) > 0) == bool(have)
    (terms["svlc"] + terms["svlc_negative"]).backward()
    (total + negative).backward()
    for x, y in zip(ours, theirs, strict=True):
        none = torch.zeros_like(x)  # the negatives of a batch without one: no gradient in the released form
        assert torch.allclose(none if x.grad is None else x.grad, none if y.grad is None else y.grad, atol=1e-6, rtol=0)
    if not have:
        assert torch.allclose(terms["svlc"], CLIPLoss()(a[0], a[1], scale))


def restated(caption):
    """Every negative the released `Negatives.create_negs` can make of `caption`, by the lists it can draw: those with an
    entry in the caption's text; of the drawn one, a whole word of the caption replaced by a word of the list that is
    not one, wherever its text occurs."""
    tokens = caption.split()
    possible = set()
    for words in LISTS.values():
        if any(w in caption for w in words):
            possible |= {caption.replace(old, new) for old in words if old in tokens for new in words if new not in tokens}
    return possible


@pytest.fixture(scope="module")
def coco():
    return [a["caption"].strip() for a in json.loads(shared_data("coco", "captions_val2017.json").read_text())["annotations"][:1000]]


def test_svlc_negatives_of_1000_coco_captions_are_the_released_rules(coco):
    """728 of 1,000 COCO captions get a negative (printed with examples); each one is a negative the released rule can
    make, never the caption, never its words reordered; 91 differ under replace=word, where the released str.replace
    also changes the word inside others ("in" in "wearing")."""
    made = {c: rule_based_negatives(c) for c in coco}
    with_negative = [c for c in coco if made[c]]
    print(f"\nsvlc: {len(with_negative)} of {len(coco)} COCO captions get a rule-based negative")
    for c in with_negative[:8]:
        print(f"  {c!r} -> {made[c][0]!r}")
    assert len(with_negative) == 728
    for caption, negatives in made.items():
        assert len(negatives) <= 1 and all(n in restated(caption) for n in negatives), caption
        assert all(n != caption and Counter(n.split()) != Counter(caption.split()) for n in negatives), caption
    assert made["A black Honda motorcycle with a dark burgundy seat."] == ["A brown Honda motorcycle with a dark burgundy seat."]
    assert made["An older man is wearing a funny hat in his dining room."] == [
        "An older man is wearridingg a funny hat riding his dridingridingg room."]
    word = {c: rule_based_negatives(c, replace="word") for c in coco}
    assert sum(word[c] != made[c] for c in coco) == 91
    assert word["An older man is wearing a funny hat in his dining room."] == [
        "An older man is wearing a funny hat riding his dining room."]
    # a list is drawn among those whose text is in the caption: "tan" is in "standing", and a drawn colour makes nothing
    assert rule_based_negatives("a man standing", k=1, types=("color",)) == []
    # k negatives: distinct replacement words of one list, seeded by (seed, caption)
    three = rule_based_negatives("a red car", k=3, seed=5)
    assert len(set(three)) == 3 and all(t.split()[1] in LISTS["color"] and t.split()[1] != "red" for t in three)
    assert three == rule_based_negatives("a red car", k=3, seed=5) != rule_based_negatives("a red car", k=3, seed=6)


def test_svlc_part_trains_each_image_with_its_negatives_and_refuses_unknown_lists():
    """The batch transform gives each caption its negatives, owned by its image; the options are checked by name."""
    from compclip.errors import UsageError
    from compclip.models import load_model

    model, _, tokenizer = load_model("compclip-tiny-siglip")
    method = build_method("svlc", negatives=2).bind(model)
    captions = ["a red car", "something nice", "a dog on a bed"]
    batch = method.collate([{"image": torch.zeros(3, 64, 64), "caption": c} for c in captions], tokenizer)
    assert batch["negative_image"].tolist() == [0, 0, 2, 2]
    assert torch.equal(batch["negative_text"], tokenizer(rule_based_negatives("a red car", 2) + rule_based_negatives("a dog on a bed", 2)))
    with pytest.raises(UsageError, match="negative_types must be some of color, action, material, size, state, not 'colour'"):
        build_method("svlc", negative_types="colour")
    with pytest.raises(UsageError, match="negatives per caption must be 1 to 3, not 4"):
        build_method("svlc", negatives=4)
    with pytest.raises(UsageError, match="replace must be one of substring, word"):
        build_method("svlc", replace="words")


def test_svlc_with_gradient_accumulation_trains_as_the_whole_batch():
    """compclip's step over two micro-batches of 4 gives the terms and gradients of one batch of 8: the other micro-batch's
    negatives are columns of every row and each image keeps its own for the negatives' cross-entropy."""
    import dist_grads
    from compclip.train import DistEnv
    from test_train import assert_same

    assert_same(dist_grads.compute(DistEnv(), 2, "svlc"), dist_grads.compute(DistEnv(), 1, "svlc"))


def test_svlc_rl_draws_the_language_models_negatives_or_the_rule_based_ones_evenly(coco):
    """SVLC-R+L (`llm_negatives=true`, the released BothNegatives): on 1,000 COCO captions each given two language-model
    negatives of its own, each caption's negatives are either all from its list or exactly SVLC-R's rule drawn from the
    same generator after the coin, about half each (binomial: 1,000 draws at ½ fall within 440–560 with certainty
    beyond 99.98 %); none equals its caption; an empty list gives no negative where the draw falls on it. The batch
    transform reads the list from each sample's data field."""
    from compclip.methods.svlc import list_negatives
    from compclip.models import load_model
    from compclip.text import caption_rng

    captions = list(dict.fromkeys(coco))[:1000]
    given = {c: [[[f"{c} indeed", c]], [[f"not quite {c}"]]] for c in captions}  # the caption itself among them: never a negative
    method = build_method("svlc", llm_negatives=True, negatives=2)
    assert method.sample_fields == ("llm_negatives",) and build_method("svlc").sample_fields == ()
    part = method.parts[0]
    from_list = 0
    for c in captions:
        made = part.negatives(c, {"llm_negatives": given[c]})
        rng = caption_rng(0, c)  # BothNegatives' coin, then the drawn rule's own draws, from one generator
        if rng.choice([0, 1]) == 0:
            assert made == list_negatives(c, rng, 2), c
        else:
            assert len(made) == 2 and set(made) <= {f"{c} indeed", f"not quite {c}"}, (c, made)
            from_list += 1
        assert c not in made
    assert 440 <= from_list <= 560, from_list
    assert [part.negatives(c, {"llm_negatives": []}) for c in captions[:200]].count([]) >= 80
    model, _, tokenizer = load_model("compclip-tiny-siglip")
    batch = method.bind(model).collate([{"image": torch.zeros(3, 64, 64), "caption": c, "llm_negatives": given[c]}
                                        for c in captions[:4]], tokenizer)
    expected = [t for c in captions[:4] for t in part.negatives(c, {"llm_negatives": given[c]})]
    assert torch.equal(batch["negative_text"], tokenizer(expected))


def test_svlc_rl_reads_its_negatives_from_json_lines_and_refuses_a_csv_and_a_flat_list(tmp_path, capsys):
    """`compclip train --method svlc --method-opt llm_negatives=true` trains on JSON lines holding `llm_negatives` (per
    masked word, per place, its fills); a CSV, which cannot hold a list, is refused naming the field; fills in one flat
    list (an older `compclip negatives`'), whose words cannot be told apart, are refused in one line naming the record."""
    from PIL import Image

    from conftest import run_main

    (tmp_path / "img").mkdir()
    lines = []
    for i in range(4):
        Image.new("RGB", (16, 16), (40 * i, 80, 120)).save(tmp_path / "img" / f"{i}.png")
        lines.append({"image": f"img/{i}.png", "caption": f"a red car number {i}", "llm_negatives": [[[f"a red bus number {i}"]]]})
    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ["train", "--method", "svlc", "--method-opt", "llm_negatives=true", "--model", "compclip-tiny-siglip", "--steps", "1",
            "--batch-size", "4", "--workers", "0"]
    code, _, err = run_main(capsys, "-q", *args, "--train-data", data, "--out", tmp_path / "run")
    assert code == 0, err[-3000:]
    assert "Svlc_negative: " in (tmp_path / "run" / "train.log").read_text()
    csv = tmp_path / "t.csv"
    csv.write_text("image,caption\n" + "".join(f"img/{i}.png,a red car\n" for i in range(4)))
    code, _, err = run_main(capsys, *args, "--train-data", csv, "--out", tmp_path / "run2")
    assert code == 2 and f"{csv}: the method reads a field 'llm_negatives' per sample" in err, err[-2000:]
    flat = tmp_path / "flat.jsonl"
    flat.write_text("".join(json.dumps({**line, "llm_negatives": line["llm_negatives"][0][0] * 2}) + "\n" for line in lines))
    code, _, err = run_main(capsys, "-q", *args, "--train-data", flat, "--out", tmp_path / "run3")
    assert code == 2 and err.startswith(f"error: {flat}:") and "field 'llm_negatives' holds its fills as one flat list" in err, err
    assert len(err.strip().splitlines()) == 1, err
