"""CE-CLIP (`--method ceclip`): its loss against the released `Clip_DALoss` formula written out term by term, its
thresholds step to step, and its relation swaps on real COCO captions."""
import json

import pytest
import torch
import torch.nn.functional as F

from compclip.concepts import extract
from compclip.methods import CECLIPLoss, build_method, relation_negative
from conftest import assert_same_terms, shared_data


def released_formula(image, gt, negatives, valid, scale, thresholds, imc_target="first_negative", cmr_weight=0.2, imc_weight=0.3,
                     upper_bound=10.0):
    """The released single-process `Clip_DALoss.forward` with `hardnegative`, `cmr_loss` and `imc_loss`, one row at a
    time: `get_imc_loss`'s class 0 is the batch's first negative (HEAD), or the image-caption logit put first (commit
    7f4433a, `imc_target="image"`); the negatives of `valid` 0 are left out, as compclip has no text for them. Returns
    the three weighted terms and the next thresholds."""
    n, types = valid.shape
    texts = [gt[i] for i in range(n)] + [negatives[i, k] for i in range(n) for k in range(types) if valid[i, k]]
    columns = torch.stack(texts)
    itc = cmr = imc = 0
    for i in range(n):
        row = scale * columns @ image[i]
        itc = itc + (row.logsumexp(0) - row[i]) / (2 * n)
        column = scale * torch.stack([image[j] @ gt[i] for j in range(n)])
        itc = itc + (column.logsumexp(0) - column[i]) / (2 * n)
        positive = scale * image[i] @ gt[i]
        for k in range(types):
            if valid[i, k]:
                cmr = cmr + torch.clamp(thresholds[k] + scale * image[i] @ negatives[i, k] - positive, min=0) / (n * types)
        intra = scale * columns[n:] @ gt[i]
        if imc_target == "image":
            intra = torch.cat([positive[None], intra])
        imc = imc + (intra.logsumexp(0) - intra[0]) / n
    with torch.no_grad():
        mean_positive = sum(scale * image[i] @ gt[i] for i in range(n)) / n
        mean_negative = [sum(scale * image[i] @ negatives[i, k] for i in range(n) if valid[i, k]) / valid[:, k].sum() for k in range(types)]
        following = torch.stack([(mean_positive - m).clamp(0, upper_bound) for m in mean_negative])
    return {"ceclip": itc, "ceclip_cmr": cmr_weight * cmr, "ceclip_imc": imc_weight * imc}, following


def leaves(seed):
    g = torch.Generator().manual_seed(seed)
    image, text, negatives = torch.randn(6, 8, generator=g), torch.randn(6, 8, generator=g), torch.randn(6, 4, 8, generator=g)
    return [x.requires_grad_() for x in (image, text, negatives)]


@pytest.mark.parametrize("imc_target", ["first_negative", "image"])
def test_ceclip_loss_is_the_released_formula_with_its_gradients_and_thresholds(imc_target):
    """Four negative types as the released files carry, two of them missing for some captions; margins large enough
    that the rank term is active for some pairs and not others, then the thresholds the first step hands to the next."""
    valid = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1], [1, 1, 0, 1], [0, 1, 1, 1], [1, 1, 1, 0], [1, 0, 1, 1]], dtype=torch.float64)
    thresholds = torch.tensor([0.5, 1.0, 2.0, 3.0], dtype=torch.float64)
    scale = torch.tensor(10.0, dtype=torch.float64)
    loss = CECLIPLoss(imc_target=imc_target)
    for step in range(2):
        ours, theirs = leaves(step), leaves(step)
        a = [F.normalize(x.double(), dim=-1) for x in ours]
        b = [F.normalize(x.double(), dim=-1) for x in theirs]
        terms, following = loss(a[0], a[1], a[2], valid, scale, thresholds)
        expected, expected_following = released_formula(b[0], b[1], b[2], valid, scale, thresholds, imc_target)
        assert float(terms["ceclip_cmr"].detach()) > 0 and not following.requires_grad
        assert torch.allclose(following, expected_following, atol=1e-6, rtol=0)
        assert_same_terms(terms, expected, ours, theirs)
        thresholds = following


def test_ceclip_ranks_every_micro_batch_of_a_step_with_the_thresholds_of_the_step_before():
    """The part takes the next thresholds at the step's start: two calls in one step (accumulation) rank alike, the
    following step ranks with the batch's mean margin, and `threshold_reset` sets them back to 0."""
    part = build_method("ceclip", threshold_reset=3).parts[0]
    image, text, negatives = (F.normalize(x.detach(), dim=-1) for x in leaves(0))
    out = {"image_features": image, "text_features": text, "negative_features": negatives[:, :1],
           "negative_mask": torch.ones(6, 1), "logit_scale": torch.tensor(10.0)}
    part.begin_step(1)
    first, again = part(out), part(out)
    assert float(part.thresholds) == 0 and all(torch.equal(first[k], again[k]) for k in first)
    _, margin = released_formula(image, text, negatives[:, :1], torch.ones(6, 1), 10.0, torch.zeros(1))
    part.begin_step(2)
    assert torch.allclose(part.thresholds, margin.float()) and float(margin) > 0
    part(out)
    part.begin_step(3)
    assert float(part.thresholds) == 0


@pytest.fixture(scope="module")
def coco():
    captions = [a["caption"].strip() for a in json.loads(shared_data("coco", "captions_val2017.json").read_text())["annotations"][:1000]]
    return captions, extract(captions, "pos")


def test_ceclip_swaps_the_first_two_nouns_of_a_coco_caption_with_more_than_two(coco):
    """The released `TextAugment.mask_captions` rule on 1,000 COCO captions: 875 have more than two nouns (spaCy), and
    all but the 4 whose first two nouns are one word get a negative, never the caption itself."""
    captions, records = coco
    made = {c: relation_negative(c, r) for c, r in zip(captions, records, strict=True)}
    for caption, record in zip(captions, records, strict=True):
        nouns = [p[0] for p in record["pos"] if p[3] == "NOUN"]
        if len(nouns) <= 2:
            assert made[caption] is None
            continue
        first, second = nouns[:2]
        expected = second.join(piece.replace(second, first) for piece in caption.split(first))  # every occurrence, as str.replace
        assert made[caption] == (None if expected == caption else expected)
    negatives = [made[c] for c in captions if made[c] is not None]
    assert len(negatives) == 871 and all(n != c for c, n in made.items())
    assert made["Two women waiting at a bench next to a street."] == "Two bench waiting at a women next to a street."
    assert made["A Honda motorcycle parked in a grass driveway"] == "A Honda grass parked in a motorcycle driveway"


def test_ceclip_trains_a_caption_without_a_relation_swap_as_a_plain_pair():
    """A batch whose captions have no swap leaves the rank and intra-modal terms at 0 and the InfoNCE CLIP's."""
    from compclip.methods import CLIPLoss

    image, text, _ = (F.normalize(x.detach(), dim=-1) for x in leaves(3))
    terms, following = CECLIPLoss()(image, text, torch.zeros(6, 1, 8), torch.zeros(6, 1), torch.tensor(10.0), torch.tensor([2.5]))
    assert float(terms["ceclip_cmr"]) == 0 and float(terms["ceclip_imc"]) == 0 and float(following) == 2.5
    assert torch.allclose(terms["ceclip"], CLIPLoss()(image, text, torch.tensor(10.0)))


def test_ceclip_with_gradient_accumulation_trains_as_the_whole_batch():
    """compclip's step over two micro-batches of 4 gives the terms and gradients of one batch of 8: the negatives of the
    other micro-batch are columns of every row, as the released code's single batch has them."""
    import dist_grads
    from compclip.train import DistEnv
    from test_train import assert_same

    assert_same(dist_grads.compute(DistEnv(), 2, "ceclip"), dist_grads.compute(DistEnv(), 1, "ceclip"))
