"""Every other benchmark on small data generated in its published layout, with answers known by
construction: a model that sees the planted colour must score 100 %, its opposite 0 %."""
import json

import numpy as np
import pytest
import torch
from PIL import Image

from compclip.eval import REGISTRY, DualEncoderScorer, Scorer

COLOURS = {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255)}


class ColourModel(torch.nn.Module):
    """Embeds an image as its dominant colour channels and a text by the first colour word it names: a
    stand-in "perfect" model whose right answers are known, so the harness's bookkeeping is what is tested.
    Both embeddings are 0/1 vectors (a text naming no colour is all zeros), so every score is exactly
    0 or ±1 after normalisation and ties are exact in any float arithmetic."""

    def __init__(self, sign: float = 1.0):
        super().__init__()
        self.sign = sign
        self.anchor = torch.nn.Parameter(torch.zeros(1))

    def encode_image(self, images):
        return (images.mean(dim=(2, 3)) > 0.5).float()

    def encode_text(self, tokens):
        return self.sign * tokens[:, :3].float()


def preprocess(image):
    return torch.from_numpy(np.asarray(image.resize((8, 8)), dtype=np.float32)).permute(2, 0, 1) / 255


def tokenizer(texts):
    first = [next((w for w in t.lower().split() if w in COLOURS), None) for t in texts]
    return torch.tensor([[c == "red", c == "green", c == "blue"] for c in first], dtype=torch.long)


def scorer(sign=1.0):
    return DualEncoderScorer(ColourModel(sign), preprocess, tokenizer, workers=0)


def solid(path, colour, size=(16, 16)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, COLOURS[colour]).save(path)


@pytest.mark.parametrize("sign,expected", [(1.0, 1.0), (-1.0, 0.0)])
def test_winoground_and_inpaint(tmp_path, sign, expected):
    root = tmp_path
    (root / "winoground").mkdir()
    lines = []
    for i, (a, b) in enumerate([("red", "blue"), ("green", "red")]):
        solid(root / "winoground" / "images" / f"ex_{i}_0.png", a)
        solid(root / "winoground" / "images" / f"ex_{i}_1.png", b)
        lines.append(
            json.dumps({"id": i, "image_0": f"ex_{i}_0", "image_1": f"ex_{i}_1", "caption_0": f"a {a} thing", "caption_1": f"a {b} thing"})
        )
    (root / "winoground" / "examples.jsonl").write_text("\n".join(lines) + "\n")
    result = REGISTRY["winoground"].run(scorer(sign), root, "strict")
    assert result.metrics == {"text": expected, "image": expected, "group": expected, "n": 2}

    base = root / "inpaint_coco"
    solid(base / "orig.jpg", "red")
    solid(base / "inp.jpg", "green")
    (base / "annotations.jsonl").write_text(json.dumps({"coco_image": "orig.jpg", "inpaint_image": "inp.jpg", "coco_caption": "a red car",
                                                        "inpaint_caption": "a green car", "category": "color"}) + "\n")
    result = REGISTRY["inpaint_coco"].run(scorer(sign), root, "strict")
    assert result.metrics["color"]["acc"] == expected and result.complete


def test_aro_relation_crops_the_region(tmp_path):
    base = tmp_path / "aro"
    image = Image.new("RGB", (40, 20), COLOURS["blue"])
    image.paste(COLOURS["red"], (0, 0, 20, 20))  # left half red
    (base / "images").mkdir(parents=True)
    image.save(base / "images" / "1.png")
    records = [
        {
            "image_path": "1.png",
            "bbox_x": 0,
            "bbox_y": 0,
            "bbox_w": 20,
            "bbox_h": 20,
            "true_caption": "the red left",
            "false_caption": "the blue left",
            "relation_name": "left of",
        },
        {
            "image_path": "1.png",
            "bbox_x": 20,
            "bbox_y": 0,
            "bbox_w": 20,
            "bbox_h": 20,
            "true_caption": "the blue right",
            "false_caption": "the red right",
            "relation_name": "right of",
        },
        {
            "image_path": "missing.png",
            "bbox_x": 0,
            "bbox_y": 0,
            "bbox_w": 5,
            "bbox_h": 5,
            "true_caption": "a",
            "false_caption": "b",
            "relation_name": "on",
        },
    ]
    (base / "visual_genome_relation.json").write_text(json.dumps(records))
    result = REGISTRY["aro_vg_relation"].run(scorer(), tmp_path, "strict")
    assert result.metrics["acc"] == 1.0 and result.metrics["n"] == 2 and result.metrics["groups"] == 2
    assert not result.complete and result.missing.report()["count"] == 1


def test_aro_order_shuffles_are_permutations_of_the_caption():
    from compclip.concepts import extract
    from compclip.eval.aro import shuffles

    caption = "a small red bus parked next to a tall white building"
    options = shuffles(caption, extract([caption], what="pos")[0]["pos"], seed=3)
    assert len(options) == 4
    for option in options:
        assert sorted(option.split()) == sorted(caption.split())
    assert len(set(options)) > 1
    nouns_adjs = options[0].split()
    for i, w in enumerate(caption.split()):
        if w in ("a", "parked", "next", "to"):
            assert nouns_adjs[i] == w  # only nouns and adjectives moved


def test_whatsup_and_vl_checklist(tmp_path):
    base = tmp_path / "whatsup"
    solid(base / "controlled_images" / "a.jpeg", "green")
    (base / "controlled_images_dataset.json").write_text(json.dumps([
        {"image_path": "data/controlled_images/a.jpeg", "caption_options": ["a green mug", "a red mug", "a blue mug", "a mug"]},
    ]))
    solid(tmp_path / "coco" / "val2017" / "000000000042.jpg", "blue")
    (base / "coco_qa_one_obj.json").write_text(json.dumps([[42, "a blue plate", "a red plate"]]))
    result = REGISTRY["whatsup"].run(scorer(), tmp_path, "strict")
    assert result.metrics["controlled_a"]["acc"] == 1.0 and result.metrics["coco_one_obj"]["acc"] == 1.0

    vl = tmp_path / "vl_checklist"
    solid(vl / "images" / "x.jpg", "red")
    (vl / "Attribute" / "color").mkdir(parents=True)
    (vl / "Attribute" / "color" / "vaw.json").write_text(
        json.dumps([["x.jpg", {"POS": ["red apple", "red car"], "NEG": ["green apple", "blue car"]}]])
    )
    (vl / "Object").mkdir()
    (vl / "Object" / "size.json").write_text(json.dumps([["x.jpg", {"POS": ["red ball"], "NEG": ["red ball too"]}]]))  # a tie
    strict = REGISTRY["vl_checklist"].run(scorer(), tmp_path, "strict")
    lenient = REGISTRY["vl_checklist"].run(scorer(), tmp_path, "clip_benchmark")
    assert strict.metrics["Attribute"] == 1.0 and strict.metrics["Object"] == 0.0 and lenient.metrics["Object"] == 1.0
    assert strict.metrics["Attribute/color/vaw"] == {"acc": 1.0, "n": 2}


def test_zeroshot_with_class_folders_and_templates(tmp_path):
    base = tmp_path / "zeroshot" / "colours"
    for i, colour in enumerate(COLOURS):
        for k in range(2):
            solid(base / f"{i}_{colour}" / f"{k}.png", colour)
    (base / "classnames.txt").write_text("red\ngreen\nblue\n")
    (base / "templates.txt").write_text("a photo of {}.\na {} thing.\n")
    result = REGISTRY["zeroshot"].run(scorer(), tmp_path, "strict")
    assert result.metrics["colours"] == {"acc": 1.0, "n": 6, "classes": 3, "templates": 2}
    (base / "classnames.txt").write_text("red\ngreen\n")
    with pytest.raises(ValueError, match="3 class folders but 2 class names"):
        REGISTRY["zeroshot"].run(scorer(), tmp_path, "strict")


def test_concept_ranking_permutes_one_keyword(tmp_path):
    coco = tmp_path / "coco"
    solid(coco / "val2017" / "1.jpg", "red")
    solid(coco / "val2017" / "2.jpg", "blue")
    (coco / "captions_val2017.json").write_text(json.dumps({
        "images": [{"id": 1, "file_name": "1.jpg"}, {"id": 2, "file_name": "2.jpg"}],
        "annotations": [{"image_id": 1, "caption": "A Red car on a road."}, {"image_id": 2, "caption": "a blue bus"}],
    }))
    bench = REGISTRY["concept_ranking"]
    examples = bench.examples(tmp_path)
    assert sorted(len(opts) for _, opts in examples["color"]) == [9, 9]  # the true caption and 8 other colours
    first = next(opts for f, opts in examples["color"] if f == "1.jpg")
    assert first[0] == "A Red car on a road." and "A Blue car on a road." in first  # case kept
    assert sorted(o for _, opts in examples["object"] for o in opts[:1]) == ["A Red car on a road.", "a blue bus"]
    result = bench.run(scorer(), tmp_path, "strict")
    assert result.metrics["color"]["acc"] == 1.0


def test_retrieval_karpathy_and_long_captions(tmp_path):
    folder = tmp_path / "retrieval" / "coco"
    for colour in COLOURS:
        solid(folder / "val2014" / f"{colour}.jpg", colour)
    images = [
        {"filepath": "val2014", "filename": f"{c}.jpg", "split": "test", "sentences": [{"raw": f"a {c} wall"}, {"raw": f"{c} paint"}]}
        for c in COLOURS
    ]
    images.append({"filepath": "val2014", "filename": "unused.jpg", "split": "train", "sentences": [{"raw": "x"}]})
    (folder / "dataset_coco.json").write_text(json.dumps({"images": images}))
    docci = tmp_path / "retrieval" / "docci"
    for colour in ("red", "blue"):
        solid(docci / "images" / f"{colour}.png", colour)
    (docci / "long_captions.jsonl").write_text(
        "\n".join(
            json.dumps({"image": f"{c}.png", "caption": f"A {c} square. It fills the frame! Nothing else is {c}."}) for c in ("red", "blue")
        )
        + "\n"
    )
    result = REGISTRY["retrieval"].run(scorer(), tmp_path, "strict")
    assert (result.metrics["coco"]["images"], result.metrics["coco"]["captions"]) == (3, 6)
    assert result.metrics["coco"]["image_retrieval_recall@1"] == 1.0 and result.metrics["coco"]["text_retrieval_recall@1"] == 1.0
    # three sentences per description; "It fills the frame!" names no colour, and the tokenizer does not read
    # "red." in "Nothing else is red." as a colour: both tie every image, which `strict` counts as a miss
    assert result.metrics["docci"]["captions"] == 6
    assert result.metrics["docci"]["image_retrieval_recall@1"] == pytest.approx(2 / 6)  # a count of 2 in float32


def test_aro_order_runs_over_karpathy_records(tmp_path):
    solid(tmp_path / "coco" / "val2014" / "a.jpg", "red")
    (tmp_path / "aro").mkdir()
    (tmp_path / "aro" / "coco_karpathy_test.json").write_text(
        json.dumps([{"image": "val2014/a.jpg", "caption": ["a red car on a road", "red paint"]}])
    )
    strict = REGISTRY["aro_order"].run(scorer(), tmp_path, "strict")
    lenient = REGISTRY["aro_order"].run(scorer(), tmp_path, "clip_benchmark")
    # every shuffle keeps the one colour word, so the colour model ties all five options
    assert strict.metrics["coco_order"] == {"acc": 0.0, "n": 2} and lenient.metrics["coco_order"] == {"acc": 1.0, "n": 2}


class PairwiseScorer(Scorer):
    """A scorer that is not a dual encoder as far as the benchmarks can tell: it scores each pair on its own
    (as OC-CLIP's graph-conditioned score does) and has no text-to-text score."""

    def __init__(self):
        self.embed = scorer()  # the colour model's exact 0/1 embeddings, looked up one pair at a time
        self.encoded = self.embed.encoded

    def pairs(self, images, texts, boxes=None):
        boxes = boxes or [None] * len(images)
        return torch.tensor([float(self.embed.images([i], [b] if b else None)[0] @ self.embed.texts([t])[0])
                             for i, t, b in zip(images, texts, boxes, strict=True)])

    def matrix(self, images, texts):
        return torch.stack([self.pairs([i] * len(texts), texts) for i in images]) if images else torch.zeros(0, len(texts))


def test_a_scorer_without_text_scores_gives_tot_na_and_the_same_image_text_answers(tmp_path):
    from compclip.eval.report import build_report

    (tmp_path / "sugarcrepe_pp").mkdir()
    for i, split in enumerate(("replace_obj", "replace_att", "replace_rel", "swap_obj", "swap_att")):
        solid(tmp_path / "coco" / "val2017" / f"{i}.jpg", "red")
        rows = [{"id": 0, "filename": f"{i}.jpg", "caption": "a red car", "caption2": "a car, red", "negative_caption": "a blue car"}]
        (tmp_path / "sugarcrepe_pp" / f"{split}.json").write_text(json.dumps(rows))
    pairwise = REGISTRY["sugarcrepe_pp"].run(PairwiseScorer(), tmp_path, "strict").metrics
    dual = REGISTRY["sugarcrepe_pp"].run(scorer(), tmp_path, "strict").metrics
    assert pairwise["swap_att"]["tot"] == "n/a" and pairwise["overall_tot"] == "n/a" and pairwise["swap_tot"] == "n/a"
    assert dual["swap_att"]["tot"] == 1.0 and pairwise["overall_itt"] == dual["overall_itt"] == 1.0
    folder = tmp_path / "results" / "pairwise"
    folder.mkdir(parents=True)
    (folder / "sugarcrepe_pp.json").write_text(json.dumps({"metrics": pairwise, "complete": True, "ties": "strict"}))
    report = build_report([folder], tmp_path / "report").read_text()
    assert "| pairwise | — | — | — | 100.0 | n/a | 100.0 | n/a | — | — | — | — |" in report
