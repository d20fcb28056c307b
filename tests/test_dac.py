"""DAC (`--method dac`): its loss against the released `ClipLoss` formula (src/open_clip/loss.py) written out as the
released code computes it, its word-list negatives on real COCO captions, and its data field (`dense_captions`) through
the readers and `compclip train`."""
import io
import json
import logging
import tarfile

import pytest
import torch
import torch.nn.functional as F

from compclip.data import open_reader
from compclip.methods import DACLoss, word_list_negative
from compclip.text import caption_rng
from conftest import assert_same_terms, run_main, shared_data


def released_formula(image, text, negatives, has_negative, dense, dense_negatives, dense_mask, scale, absent="zeros"):
    """The released single-process `ClipLoss.forward` with `vl_negs`, `mil_dense` and `mil_dense_negs`, as it is written:
    the texts with the existing negatives stacked after them, the MIL logits a B × (B·k) matrix viewed (B, B, k) and its
    diagonal taken through an identity mask (`get_loss_mil_dense`), the negative term over the images that have one
    (`get_loss_neg_only`). With `absent="masked"` a missing dense negative is left out of its image's log-sum-exp."""
    n, k, _ = dense.shape
    have = [i for i in range(n) if has_negative[i]]
    texts = torch.cat([text, negatives[have]]) if have else text
    labels = torch.arange(n)
    logits_per_image = scale * image @ texts.T
    logits_per_text = (scale * texts @ image.T)[:n]
    total = (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)) / 2
    x = (scale * image @ dense.reshape(n * k, -1).T).view(n, n, k)
    eye = torch.eye(n, dtype=x.dtype)[:, :, None]
    nominator = torch.logsumexp((x * eye).sum(dim=1), dim=1)
    x_neg = (scale * image @ dense_negatives.reshape(n * k, -1).T).view(n, n, k)
    x_eye, x_eye_neg = (x * eye).sum(dim=1), (x_neg * eye).sum(dim=1)
    if absent == "masked":
        x_eye_neg = x_eye_neg.masked_fill(dense_mask == 0, float("-inf"))
    mil = torch.mean(torch.logsumexp(torch.cat((x_eye, x_eye_neg), dim=1), dim=1) - nominator)
    mil = mil + torch.mean(torch.logsumexp(torch.cat((x, x.permute(1, 0, 2)), dim=1).view(n, -1), dim=1) - nominator)
    pos_neg = torch.stack([text[have], negatives[have]], dim=1)
    neg = F.cross_entropy(scale * torch.matmul(pos_neg, image[have].unsqueeze(2))[:, :, 0], torch.zeros(len(have), dtype=torch.long))
    return {"dac": total, "dac_neg": neg, "dac_mil": mil}


def leaves(seed):
    g = torch.Generator().manual_seed(seed)
    shapes = [(6, 8), (6, 8), (6, 8), (6, 3, 8), (6, 3, 8)]
    return [torch.randn(*s, generator=g, dtype=torch.float64).requires_grad_() for s in shapes]


@pytest.mark.parametrize("absent", ["zeros", "masked"])
def test_dac_loss_is_the_released_formula_with_its_gradients(absent):
    """Four of six captions with a negative, some MIL texts without one: the three terms and every input's gradient."""
    has_negative = torch.tensor([1, 0, 1, 1, 0, 1], dtype=torch.float64)
    dense_mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 1, 1], [0, 1, 0], [1, 0, 1], [1, 1, 1]], dtype=torch.float64)
    scale = torch.tensor(10.0, dtype=torch.float64)
    ours, theirs = leaves(0), leaves(0)
    a = [F.normalize(x, dim=-1) for x in ours]
    b = [F.normalize(x, dim=-1) for x in theirs]
    terms = DACLoss(absent=absent)(a[0], a[1], a[2] * has_negative[:, None], has_negative, a[3], a[4], dense_mask, scale)
    expected = released_formula(b[0], b[1], b[2], has_negative, b[3], b[4], dense_mask, scale, absent)
    assert_same_terms(terms, expected, ours, theirs)


@pytest.fixture(scope="module")
def coco():
    return [a["caption"].strip() for a in json.loads(shared_data("coco", "captions_val2017.json").read_text())["annotations"][:1000]]


def test_dac_word_list_negatives_of_1000_coco_captions(coco):
    """The released `Negatives.create_negs` on 1,000 COCO captions: 763 get a negative, none the caption itself; a word
    of a list is replaced wherever its letters stand, as the released `str.replace` does ("sitting" holds "in")."""
    made = {c: word_list_negative(c, caption_rng(0, "dac", c)) for c in coco}
    negatives = {c: n for c, n in made.items() if n is not None}
    assert sum(c in negatives for c in coco) == 763 and all(n != c for c, n in negatives.items())
    assert negatives["A black Honda motorcycle parked in front of a garage."] == "A bronze Honda motorcycle parked in front of a garage."
    assert negatives["A small closed toilet in a cramped space."] == "A broad closed toilet in a cramped space."
    assert negatives["A woman sitting on a bench in the middle of the city"] == \
        "A woman sittwatchingg on a bench watching the middle of the city"
    assert word_list_negative("a photo", caption_rng(0, "dac", "a photo")) is None


def write_images(root, n):
    from PIL import Image

    (root / "img").mkdir(parents=True)
    for i in range(n):
        Image.new("RGB", (16, 16), (40 * i, 80, 120)).save(root / "img" / f"{i}.jpg")


def test_dense_captions_are_read_from_json_lines_and_shards_and_a_bad_value_is_a_counted_bad_record(tmp_path, caplog):
    """The field under its own key or the one `--field-key` names, in JSON lines and in a shard's json; a value that is
    not a list of texts is skipped, counted and named by its file and line (or shard and key)."""
    write_images(tmp_path, 4)
    values = [["a red cup", "a table"], [], "a red cup", ["a cup", 3]]
    lines = [json.dumps({"image": f"img/{i}.jpg", "caption": f"caption {i}", "llm": v}) for i, v in enumerate(values)]
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="compclip.data"):
        reader = open_reader(tmp_path / "t.jsonl", fields={"dense_captions": "llm"})
        samples = list(reader)
    assert [s["dense_captions"] for s in samples] == [["a red cup", "a table"], []]
    assert reader.stats()["bad_record"] == 2
    assert f"{tmp_path / 't.jsonl'}:3 (field 'llm': a str, not a list of texts)" in caplog.text
    assert f"{tmp_path / 't.jsonl'}:4 (field 'llm': holds 3, not a text)" in caplog.text
    with tarfile.open(tmp_path / "s-000.tar", "w") as tar:
        for i, value in enumerate(values[:3]):
            for ext, payload in (("jpg", (tmp_path / "img" / f"{i}.jpg").read_bytes()),
                                 ("json", json.dumps({"caption": f"caption {i}", "dense_captions": value}).encode())):
                info = tarfile.TarInfo(f"{i:05d}.{ext}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    shards = open_reader(tmp_path / "s-000.tar", fields={"dense_captions": "dense_captions"})
    assert [s["dense_captions"] for s in shards] == [["a red cup", "a table"], []] and shards.stats()["bad_record"] == 1


@pytest.mark.parametrize("kind", ["csv", "captions_json"])
def test_compclip_train_refuses_dac_on_data_that_cannot_hold_dense_captions(kind, tmp_path, capsys):
    """A CSV of one caption a row, or a captions JSON: one error line naming the field, the file and the format to write."""
    write_images(tmp_path, 2)
    if kind == "csv":
        data = tmp_path / "t.csv"
        data.write_text("image,caption\nimg/0.jpg,a cup\nimg/1.jpg,a red cup\n")
    else:
        data = tmp_path / "t.json"
        data.write_text(json.dumps({"img/0.jpg": "a cup", "img/1.jpg": "a red cup"}))
    code, _, err = run_main(capsys, "train", "--method", "dac", "--model", "compclip-tiny-siglip", "--train-data", data, "--steps",
                            "1", "--out", tmp_path / "run")
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and f"{data}: the method reads a field 'dense_captions'" in lines[0], err
    assert "JSON lines with a 'dense_captions' list in each record" in lines[0]


def test_dac_with_gradient_accumulation_trains_as_the_whole_batch():
    """compclip's step over two micro-batches of 4 gives the terms and gradients of one batch of 8: the other
    micro-batch's negatives are columns and its MIL texts are in every image's denominator, as in one batch."""
    import dist_grads
    from compclip.train import DistEnv
    from test_train import assert_same

    assert_same(dist_grads.compute(DistEnv(), 2, "dac"), dist_grads.compute(DistEnv(), 1, "dac"))


def test_an_image_array_reads_dense_captions_from_the_scenes_beside_it_and_a_stray_field_key_is_refused(tmp_path, capsys):
    """What `compclip world generate` writes: `images.npy` with `scenes.jsonl`, whose records hold the field; a
    `--field-key` of a field the method does not read is refused, naming the ones it does."""
    import numpy as np

    np.save(tmp_path / "images.npy", np.zeros((2, 8, 8, 3), dtype=np.uint8))
    (tmp_path / "scenes.jsonl").write_text("".join(json.dumps({"caption": f"scene {i}", "dense_captions": [f"object {i}"]}) + "\n"
                                                   for i in range(2)))
    reader = open_reader(tmp_path / "images.npy", fields={"dense_captions": "dense_captions"})
    assert [s["dense_captions"] for s in reader] == [["object 0"], ["object 1"]]
    code, _, err = run_main(capsys, "train", "--method", "dac", "--model", "compclip-tiny-siglip", "--train-data",
                            tmp_path / "images.npy", "--field-key", "dense=x", "--steps", "1", "--out", tmp_path / "run")
    assert code == 2 and "error: --field-key dense: method dac reads dense_captions" in err, err
