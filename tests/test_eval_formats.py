"""Every benchmark on small data built in its official layout and record shape, scored by a stand-in model that
gets some items right, some wrong and ties others, against counts made by hand from the benchmark's own rule."""
import io
import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from compclip.eval import REGISTRY, DualEncoderScorer, Scorer

COLOURS = {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255), "yellow": (255, 255, 0)}
WORDS = ("red", "green", "blue")


class ColourModel(torch.nn.Module):
    """Embeds an image as its bright channels (red [1,0,0], yellow [1,1,0]) and a text as how often it names each of
    red, green and blue (whole words): every score is a cosine of small integer vectors, so each answer can be counted
    by hand, and equal scores are exactly equal in any float arithmetic."""

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
    return torch.tensor([[t.lower().split().count(w) for w in WORDS] for t in texts], dtype=torch.long)


def scorer(sign=1.0):
    return DualEncoderScorer(ColourModel(sign), preprocess, tokenizer, workers=0)


def solid(path, colour, size=(16, 16)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, COLOURS[colour]).save(path)


def png(colour) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), COLOURS[colour]).save(buf, "PNG")
    return buf.getvalue()


def write_parquet(path, rows, images):
    """Rows as the Hub writes a dataset with Image features: each image a struct of its bytes and path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    columns = {k: [r[k] for r in rows] for k in rows[0]}
    fields = [pa.field(k, image if k in images else pa.infer_type(v)) for k, v in columns.items()]
    arrays = [pa.array([{"bytes": png(c) if c else None, "path": None} for c in v], type=image) if k in images else pa.array(v)
              for k, v in columns.items()]
    pq.write_table(pa.Table.from_arrays(arrays, schema=pa.schema(fields)), path)


def run(name, root, ties=None, splits=(), **options):
    bench = REGISTRY[name]
    result = bench.run(scorer(), root, ties or bench.ties, splits, bench.Options(**options))
    check_items(name, result, ties or bench.ties, root)
    return result


def check_items(name, result, ties, root):
    """Every benchmark's per-item rows, written and read back as compclip eval writes them: the leading columns, and each
    row's verdict as the benchmark's rule gives it from the row's own scores."""
    import pandas as pd

    from compclip.eval.items import COLUMNS, write_items

    write_items(root / f"{name}.items.parquet", result.items)
    rows = pd.read_parquet(root / f"{name}.items.parquet")
    assert tuple(rows.columns[: len(COLUMNS)]) == COLUMNS and len(rows) == len(result.items)
    assert all(isinstance(v, str) and v for v in rows["image"]) and all(isinstance(v, str) for v in rows["true"])
    for row in rows.itertuples():
        if name in ("winoground", "eqben"):
            expected = row.text_correct and row.image_correct
        elif name == "retrieval":
            expected = row.rank == 0
        elif name == "inpaint_coco":
            grid = row.scores  # s(c, i) for c, i in (0, 0), (0, 1), (1, 0), (1, 1): each caption prefers its own image
            expected = (grid[0] > grid[1] and grid[3] > grid[2]) if ties == "strict" else (grid[0] >= grid[1] and grid[3] >= grid[2])
        elif name == "zeroshot" and ties != "strict":
            continue  # the first of tied classes wins: the row's two scores alone do not decide it
        else:  # the weakest true option against the strongest false one
            expected = row.score_true > row.score_false if ties == "strict" else row.score_true >= row.score_false
        assert bool(row.correct) == bool(expected), (name, row)


# ---- Winoground: the Hub's Parquet and the older JSONL --------------------------------------------------------------

# (image_0, image_1, caption_0, caption_1, tag, secondary_tag, num_main_preds, collapsed_tag); scores s(c, i) by hand:
WINOGROUND = [
    ("red", "blue", "a red thing", "a blue thing", "Noun", "", 1, "Object"),  # text, image, group right
    ("red", "blue", "a blue thing", "a red thing", "Verb", "Symbolic", 2, "Relation"),  # all wrong
    # caption 0 names red and green: s(c0,i0) = s(c0,i1) = 1/√2, a tie: text right, image wrong (strict)
    ("red", "green", "a red green thing", "a green thing", "Adjective-Color", "Pragmatics", 1, "Both"),
    # image 1 is yellow: s(c0,i1) = s(c1,i1) = 1/√2, a tie: image right, text wrong
    ("red", "yellow", "a red thing", "a green thing", "Noun", "Symbolic NonMinimal", 2, "Object"),
]
KEYS = ("image_0", "image_1", "caption_0", "caption_1", "tag", "secondary_tag", "num_main_preds", "collapsed_tag")


def test_winoground_reads_the_hub_parquet_and_the_older_jsonl(tmp_path):
    parquet = tmp_path / "hub"
    rows = [{"id": i, **dict(zip(KEYS, ex, strict=True))} for i, ex in enumerate(WINOGROUND)]
    write_parquet(parquet / "winoground" / "data" / "test-00000-of-00001.parquet", rows, images=("image_0", "image_1"))
    legacy = tmp_path / "jsonl"
    lines = []
    for i, ex in enumerate(WINOGROUND):
        record = {"id": i, **dict(zip(KEYS, ex, strict=True)), "image_0": f"ex_{i}_img_0", "image_1": f"ex_{i}_img_1"}
        solid(legacy / "winoground" / "data" / "images" / f"ex_{i}_img_0.png", ex[0])
        solid(legacy / "winoground" / "data" / "images" / f"ex_{i}_img_1.png", ex[1])
        lines.append(json.dumps(record))
    (legacy / "winoground" / "data" / "examples.jsonl").write_text("\n".join(lines) + "\n")
    for root in (parquet, legacy):
        strict = run("winoground", root)
        # each item's row: image 0 against its own caption and the other one, cosines counted by hand (caption 0 of the
        # third names red and green: 1/√2 on the red image)
        rows = sorted(strict.items, key=lambda r: int(r["item"]))
        assert [r["score_true"] for r in rows] == pytest.approx([1.0, 0.0, 1 / math.sqrt(2), 1.0])
        assert [r["score_false"] for r in rows] == pytest.approx([0.0, 1.0, 0.0, 0.0])
        assert strict.complete and {k: strict.metrics[k] for k in ("text", "image", "group", "n")} == {
            "text": 0.5, "image": 0.5, "group": 0.25, "n": 4}
        assert strict.metrics["collapsed_tag"] == {
            "Object": {"text": 0.5, "image": 1.0, "group": 0.5, "n": 2},
            "Relation": {"text": 0.0, "image": 0.0, "group": 0.0, "n": 1},
            "Both": {"text": 1.0, "image": 0.0, "group": 0.0, "n": 1},
        }
        assert strict.metrics["num_main_preds"]["1"] == {"text": 1.0, "image": 0.5, "group": 0.5, "n": 2}
        assert strict.metrics["secondary_tag"] == {  # a space-separated secondary tag counts in each of its tags
            "NonMinimal": {"text": 0.0, "image": 1.0, "group": 0.0, "n": 1},
            "Pragmatics": {"text": 1.0, "image": 0.0, "group": 0.0, "n": 1},
            "Symbolic": {"text": 0.0, "image": 0.5, "group": 0.0, "n": 2},
        }
        assert strict.metrics["tag"]["Adjective-Color"] == {"text": 1.0, "image": 0.0, "group": 0.0, "n": 1}
        first = run("winoground", root, "clip_benchmark")  # the tie on caption 0 of example 2 goes to image 0
        assert {k: first.metrics[k] for k in ("text", "image", "group")} == {"text": 0.5, "image": 0.75, "group": 0.5}
    (legacy / "winoground" / "data" / "images" / "ex_3_img_1.png").unlink()  # an item's second image gone: left out, named
    partial = run("winoground", legacy)
    missing = partial.missing.as_record()
    assert not partial.complete and partial.metrics["n"] == 3
    assert missing["count"] == 1 and "ex_3_img_1.png" in missing["examples"][0]


def test_winoground_parquet_without_a_column_names_the_file(tmp_path):
    rows = [{"id": 0, "image_0": "red", "image_1": "blue", "caption_0": "a", "caption_1": "b"}]
    write_parquet(tmp_path / "winoground" / "data" / "test-00000-of-00001.parquet", rows, images=("image_0", "image_1"))
    with pytest.raises(ValueError, match=r"test-00000-of-00001.parquet: no column tag, secondary_tag, num_main_preds, collapsed_tag"):
        run("winoground", tmp_path)


# ---- InpaintCOCO: the Hub's Parquet shards ------------------------------------------------------------------------


def test_inpaint_coco_reads_the_hub_parquet_per_concept(tmp_path):
    def row(concept, orig, inpainted, t_orig, t_inp):
        return {"concept": concept, "coco_caption": t_orig, "coco_image": orig, "inpaint_caption": t_inp, "inpaint_image": inpainted,
                "mask": "m"}

    data = tmp_path / "inpaint_coco" / "data"
    write_parquet(data / "test-00000-of-00002.parquet", [
        row("color", "red", "blue", "a red car", "a blue car"),  # right
        row("color", "red", "blue", "a blue car", "a red car"),  # wrong
        row("object", "red", "yellow", "a red cat", "a green dog"),  # s(i_o,t_o)=1 > 1/√2, s(i_i,t_i)=1/√2 > 0: right
    ], images=("coco_image", "inpaint_image"))
    write_parquet(data / "test-00001-of-00002.parquet", [
        row("size", "green", "green", "a green box", "a big green box"),  # every score 1: a tie, wrong
        row("size", "green", None, "a green box", "a small green box"),  # no inpainted image: missing, named
    ], images=("coco_image", "inpaint_image"))
    result = run("inpaint_coco", tmp_path)
    # the COCO image against its own caption and the inpainted one's, by hand
    assert [(r["true"], r["score_true"], r["false"], r["score_false"]) for r in result.items] == [
        ("a red car", 1.0, "a blue car", 0.0), ("a blue car", 0.0, "a red car", 1.0), ("a red cat", 1.0, "a green dog", 0.0),
        ("a green box", pytest.approx(1.0), "a big green box", pytest.approx(1.0))]
    assert result.metrics == {"acc": 0.5, "n": 4, "concept": {"color": {"acc": 0.5, "n": 2}, "object": {"acc": 1.0, "n": 1},
                                                              "size": {"acc": 0.0, "n": 1}}}
    member = f"{data / 'test-00001-of-00002.parquet'}::row 1, inpaint_image"
    assert result.missing.as_record() == {"count": 1, "unreadable": 0, "examples": [member]}


# ---- VL-CheckList: the repository's data/ tree, images per source -------------------------------------------------


def test_vl_checklist_scores_the_first_pair_and_averages_as_radar_py(tmp_path):
    base = tmp_path / "vl_checklist"
    solid(base / "images" / "vg" / "VG_100K" / "1.jpg", "red")
    solid(base / "images" / "vg" / "VG_100K_2" / "2.jpg", "blue")
    solid(base / "images" / "vg" / "VG_100K" / "3.jpg", "green")
    solid(base / "images" / "swig" / "running_1.jpg", "green")
    files = {
        # VAW's images are VG's: image root vg
        "Attribute/vaw/color.json": [["VG_100K/1.jpg", {"POS": ["red apple", "green apple"], "NEG": ["green apple", "red apple"]}],
                                     ["VG_100K_2/2.jpg", {"POS": ["red sky"], "NEG": ["blue sky"]}]],
        "Attribute/vg/color.json": [["VG_100K/1.jpg", {"POS": ["red car"], "NEG": ["blue car"]}]],
        "Attribute/vg/material.json": [],
        "Attribute/vg/state.json": [["VG_100K/1.jpg", {"POS": [], "NEG": []}],  # malformed: skipped and named
                                    ["VG_100K/1.jpg", {"POS": ["red door"], "NEG": ["green door"]}],
                                    ["VG_100K/9.jpg", {"POS": ["red"], "NEG": ["blue"]}]],  # image missing
        "Relation/vg/spatial.json": [["VG_100K/3.jpg", {"POS": ["a green cup left of a box", "red"], "NEG": ["a red cup left of it"]}],
                                     ["VG_100K/3.jpg", {"POS": ["blue cup"], "NEG": ["green cup"]}]],
        "Object/Size/swig_size/swig_agent/swig_agent_large.json": [
            ["running_1.jpg", {"POS": ["a green man", "a man"], "NEG": ["a blue man", "a woman"]}]],
    }
    for name, records in files.items():
        (base / "data" / name).parent.mkdir(parents=True, exist_ok=True)
        (base / "data" / name).write_text(json.dumps(records))
    result = run("vl_checklist", tmp_path)
    m = result.metrics
    assert m["files"] == {"Attribute/vaw/color": {"acc": 0.5, "n": 2}, "Attribute/vg/color": {"acc": 1.0, "n": 1},
                          "Attribute/vg/state": {"acc": 1.0, "n": 1}, "Relation/vg/spatial": {"acc": 0.5, "n": 2},
                          "Object/Size/swig_size/swig_agent/swig_agent_large": {"acc": 1.0, "n": 1}}
    assert m["color"] == {"acc": 0.75, "vg": 1.0, "vaw": 0.5}  # the mean over sources of each source's mean over its files
    assert math.isnan(m["material"]["acc"]) and m["state"] == {"acc": 1.0, "vg": 1.0}
    assert (m["Attribute"], m["Relation"], m["Object"]) == (0.875, 0.5, 1.0)  # over the sub-dimensions with a score
    assert m["overall"] == pytest.approx((0.875 + 0.5 + 1.0) / 3)
    data = base / "data"
    assert result.absent[str(data / "Attribute/vg/material.json")] == "empty: nothing to score"
    assert result.absent[str(data / "Attribute/vaw/material.json")] == "absent: not scored"
    assert "1 malformed records skipped" in result.absent[str(data / "Attribute/vg/state.json")]
    assert result.missing.as_record()["examples"] == [str(base / "images" / "vg" / "VG_100K" / "9.jpg")] and not result.complete
    assert len(REGISTRY["vl_checklist"].images(tmp_path)) == 5  # what `compclip data check` looks for, the missing one too
    zipped = run("vl_checklist", tmp_path, pairs="zip").metrics  # every k-th POS against the k-th NEG
    assert zipped["files"]["Attribute/vaw/color"] == {"acc": pytest.approx(1 / 3), "n": 3}
    assert zipped["files"]["Object/Size/swig_size/swig_agent/swig_agent_large"] == {"acc": 0.5, "n": 2}  # "a man"/"a woman": a tie
    capped = run("vl_checklist", tmp_path, max_per_file=1).metrics
    assert capped["files"]["Attribute/vaw/color"] == {"acc": 1.0, "n": 1}
    attribute = run("vl_checklist", tmp_path, splits=("Attribute",)).metrics
    assert attribute["overall"] == attribute["Attribute"] == 0.875 and "Object" not in attribute
    with pytest.raises(ValueError, match=r"vl_checklist\.pairs must be one of first, zip"):
        REGISTRY["vl_checklist"].Options(pairs="all")


def test_vl_checklist_averages_files_within_a_source_before_sources(tmp_path):
    """radar.py: a sub-dimension is the mean over its sources of each source's mean over its files. A source with two
    files of different accuracies and sizes tells this from the mean over files (2/3 here) and over records (4/5)."""
    base = tmp_path / "vl_checklist"
    solid(base / "images" / "vg" / "VG_100K" / "1.jpg", "red")
    solid(base / "images" / "swig" / "s.jpg", "green")
    right = ["VG_100K/1.jpg", {"POS": ["a red car"], "NEG": ["a blue car"]}]
    wrong = ["VG_100K/1.jpg", {"POS": ["a blue car"], "NEG": ["a red car"]}]
    files = {"Object/Size/vg_size/vg_obj_large.json": [right, right, right],  # vg: 1.0 and 0.0, its mean 0.5
             "Object/Size/vg_size/vg_subj_large.json": [wrong],
             "Object/Size/swig_size/swig_agent/swig_agent_large.json": [["s.jpg", {"POS": ["a green man"], "NEG": ["a red man"]}]]}
    for name, records in files.items():
        (base / "data" / name).parent.mkdir(parents=True, exist_ok=True)
        (base / "data" / name).write_text(json.dumps(records))
    m = run("vl_checklist", tmp_path, splits=("Object",)).metrics
    assert m["large"] == {"acc": 0.75, "vg": 0.5, "swig": 1.0}
    assert m["Object"] == m["overall"] == 0.75


def test_vl_checklist_corpus_names_every_file_of_the_official_summary():
    from compclip.eval.benchmarks.vl_checklist import CATEGORIES, CORPUS

    assert [d for c in CATEGORIES.values() for d in c] == list(CORPUS) and len(CORPUS) == 13
    assert CORPUS["large"]["swig"][1] == ("Object/Size/swig_size/swig_destination/swig_destination_large.json", "swig")
    assert CORPUS["mid"]["vg"] == [("Object/Location/vg_location/vg_obj_mid.json", "vg"),
                                   ("Object/Location/vg_location/vg_subj_mid.json", "vg")]
    assert CORPUS["action_a"]["vaw"] == [("Attribute/vaw/action.json", "vg")]
    assert CORPUS["action_r"]["hake"] == [("Relation/hake_action.json", "hake")]
    # corpus.json: 6 Object sub-dimensions of 2 VG, 4 SWiG and 1 HAKE files, 5 Attribute ones of 2, Relation 3 + 1
    assert sum(len(entries) for sources in CORPUS.values() for entries in sources.values()) == 6 * 7 + 5 * 2 + 4


# ---- What'sUp: the repository's data/ folder -----------------------------------------------------------------------


def controlled(pair, relation, colour, right, tie=False):
    """A subset-A record, the true caption first. Right: it names the image's colour and no distractor does; wrong: a
    distractor does and it does not; tie: both do."""
    a, b = pair
    true = f"a {colour if right else 'blue'} {a} {relation.replace('_', ' ')} a {b}"
    other = f"a {colour if tie or not right else 'green'} {a} near a {b}"
    return {"image_path": f"data/controlled_images/{a}_{relation}_{b}.jpeg", "caption_options": [true, other, "a thing", "a thing too"]}


def test_whatsup_reads_the_data_folder_with_pair_and_set_accuracy(tmp_path):
    base = tmp_path / "whatsup"
    records = []
    right = {("mug", "plate"): {"left_of": 1, "right_of": 1, "on": 1, "under": 0},
             ("cup", "table"): {"left_of": 1, "right_of": 0, "on": 1, "under": 1},
             ("box", "chair"): {"left_of": 1, "right_of": 1, "on": 1, "under": 1}}
    for pair, relations in right.items():
        for relation, ok in relations.items():
            tie = pair == ("box", "chair") and relation == "on"  # a distractor as good as the true caption: the tie goes to it
            records.append(controlled(pair, relation, "red", ok, tie))
            solid(base / "controlled_images" / f"{pair[0]}_{relation}_{pair[1]}.jpeg", "red")
    (base / "controlled_images_dataset.json").write_text(json.dumps(records))
    solid(base / "val2017" / "000000000042.jpg", "blue")
    solid(base / "val2017" / "000000000043.jpg", "blue")
    (base / "coco_qa_one_obj.json").write_text(json.dumps([[42, "a blue plate on the left", "a red plate on the right"],
                                                           [43, "a red plate on the right", "a blue plate on the left"]]))
    solid(base / "vg_images" / "7.jpg", "green")
    (base / "vg_qa_one_obj.json").write_text(json.dumps([[7, "a green cup on the top", "a red cup on the bottom"]]))
    result = run("whatsup", tmp_path)
    a = result.metrics["controlled_a"]
    assert (a["acc"], a["n"]) == (pytest.approx(10 / 12), 12)
    assert (a["pair_acc"], a["pairs"], a["set_acc"], a["sets"]) == (pytest.approx(4 / 6), 6, pytest.approx(1 / 3), 3)
    assert {p: v["acc"] for p, v in a["prepositions"].items()} == {"left_of": 1.0, "right_of": pytest.approx(2 / 3), "on": 1.0,
                                                                   "under": pytest.approx(2 / 3)}
    assert result.metrics["coco_one_obj"]["prepositions"] == {"left": {"acc": 1.0, "n": 1}, "right": {"acc": 0.0, "n": 1}}
    assert (result.metrics["coco_spatial"], result.metrics["gqa_spatial"]) == (0.5, 1.0)  # each over its subsets present
    assert result.metrics["overall"] == pytest.approx((10 / 12 + 0.5 + 1.0) / 3)  # the Table 1 figures present
    assert set(result.absent) == {str(base / f) for f in ("controlled_clevr_dataset.json", "coco_qa_two_obj.json", "vg_qa_two_obj.json")}
    assert not result.complete
    strict = run("whatsup", tmp_path, "strict", splits=("controlled_a",)).metrics
    assert strict["controlled_a"]["acc"] == pytest.approx(9 / 12) and set(strict) == {"controlled_a", "overall"}
    (tmp_path / "coco").mkdir()
    (base / "val2017").rename(tmp_path / "coco" / "val2017")  # COCO's images shared with the other benchmarks
    assert run("whatsup", tmp_path, splits=("coco_one_obj",)).metrics["coco_one_obj"] == result.metrics["coco_one_obj"]


def test_a_misplaced_download_is_named_with_where_it_goes(tmp_path):
    (tmp_path / "whatsup" / "data").mkdir(parents=True)  # the repository cloned, not its data/ folder
    (tmp_path / "whatsup" / "data" / "controlled_images_dataset.json").write_text("[]")
    message = REGISTRY["whatsup"].lacks(tmp_path, ())
    assert message.startswith(f"looked for {tmp_path / 'whatsup' / 'controlled_images_dataset.json'}, ")
    assert "DATA_ROOT/whatsup is the repository's data/ folder itself" in message and "github.com/amitakamath/whatsup_vlms" in message
    (tmp_path / "vl_checklist" / "Attribute" / "vg").mkdir(parents=True)  # the data/ tree's folders without data/
    assert "go in vl_checklist/data/" in REGISTRY["vl_checklist"].lacks(tmp_path, ())
    assert REGISTRY["winoground"].lacks(tmp_path, ()).endswith("with data/images.zip unzipped into data/images/")


def test_whatsup_two_object_prepositions_follow_evaluate_scores():
    from compclip.eval.benchmarks.whatsup import preposition

    assert [preposition("coco_two_obj", [1, c, ""]) for c in ("a dog to the left of a cat", "a dog above a cat", "a dog below a cat")] == [
        "left", "above", "below"]
    assert [preposition("gqa_two_obj", [1, c, ""]) for c in ("a cup in front of a lamp", "a cup behind a lamp", "a cup on a lamp")] == [
        "front", "behind", "top"]
    assert preposition("controlled_b", {"image_path": "data/controlled_clevr/cube_in-front_of_sphere.jpeg"}) == "in-front_of"


# ---- ARO: VG-Relation and VG-Attribution ---------------------------------------------------------------------------


def vg_record(path, box, true, false, **group):
    left = {"left": 0, "right": 20}[box]
    return {"image_path": path, "bbox_x": left, "bbox_y": 0, "bbox_w": 20, "bbox_h": 20, "true_caption": true, "false_caption": false,
            **group}


def test_aro_relation_crops_the_region_and_leaves_symmetric_relations_out_of_the_macro(tmp_path):
    base = tmp_path / "aro"
    image = Image.new("RGB", (40, 20), COLOURS["blue"])
    image.paste(COLOURS["red"], (0, 0, 20, 20))  # left half red, right half blue
    (base / "images").mkdir(parents=True)
    image.save(base / "images" / "1.png")
    records = [
        vg_record("1.png", "left", "the red cup", "the blue cup", relation_name="on"),  # right
        vg_record("1.png", "right", "the red cup", "the blue cup", relation_name="on"),  # wrong
        vg_record("1.png", "left", "red", "blue", relation_name="next to"),  # right, symmetric
        vg_record("1.png", "right", "blue", "red", relation_name="left of"),  # right
        vg_record("1.png", "left", "green", "blue", relation_name="left of"),  # both score 0: a tie, wrong
        vg_record("missing.png", "left", "a", "b", relation_name="on"),
    ]
    (base / "visual_genome_relation.json").write_text(json.dumps(records))
    result = run("aro_vg_relation", tmp_path)
    m = result.metrics
    assert m["relations"] == {"left of": {"acc": 0.5, "n": 2}, "next to": {"acc": 1.0, "n": 1}, "on": {"acc": 0.5, "n": 2}}
    assert (m["macro"], m["macro_groups"], m["acc"], m["n"]) == (0.5, 2, 0.6, 5)
    assert result.missing.as_record()["count"] == 1 and not result.complete
    assert run("aro_vg_relation", tmp_path, exclude_symmetric=False).metrics["macro"] == pytest.approx(2 / 3)

    attributes = [vg_record("1.png", "left", "red", "blue", attributes=["red", "blue"]),
                  vg_record("1.png", "right", "blue", "red", attributes=["red", "blue"]),
                  vg_record("1.png", "right", "red", "blue", attributes=["red", "blue"]),
                  vg_record("1.png", "left", "red", "green", attributes=["green", "red"])]
    (base / "visual_genome_attribution.json").write_text(json.dumps(attributes))
    default = run("aro_vg_attribution", tmp_path).metrics  # no pair has 25 records: no macro
    assert math.isnan(default["macro"]) and default["attribute_pairs"]["red_blue"] == {"acc": pytest.approx(2 / 3), "n": 3}
    assert run("aro_vg_attribution", tmp_path, min_count=2).metrics["macro"] == pytest.approx(2 / 3)
    assert run("aro_vg_attribution", tmp_path, min_count=1).metrics["macro"] == pytest.approx((2 / 3 + 1) / 2)


# ---- ARO: COCO- and Flickr30k-Order ---------------------------------------------------------------------------------


def test_pre_caption_as_the_aro_repository_cleans_captions():
    from compclip.eval.benchmarks.aro import pre_caption

    assert pre_caption('A man: "riding" a (red) bike!  \n') == "a man riding a red bike"
    assert pre_caption("Two dogs; one~brown, one #white.") == "two dogs one brown, one white"
    assert pre_caption(" ".join(f"w{i}" for i in range(40))) == " ".join(f"w{i}" for i in range(30))


def test_order_perturbations_move_what_text_shuffler_moves():
    from compclip.concepts import load_nlp
    from compclip.eval.benchmarks.aro import Shuffler

    doc = load_nlp()("A small red bus parked next to a tall white building.")
    tokens, tags = [t.text for t in doc], [t.tag_ for t in doc]
    nouns_adj = {i for i, t in enumerate(tags) if t.startswith(("NN", "JJ"))}
    first = Shuffler(1).perturb(doc)
    assert first == Shuffler(1).perturb(doc) and first != Shuffler(2).perturb(doc)  # seeded
    nouns, others, within, trigrams = (p.split(" ") for p in first)
    assert sorted(nouns) == sorted(others) == sorted(within) == sorted(tokens)
    assert [w for i, w in enumerate(nouns) if i not in nouns_adj] == [w for i, w in enumerate(tokens) if i not in nouns_adj]
    noun_words = lambda words: sorted(w for i, w in enumerate(words) if tags[i].startswith("NN"))  # noqa: E731
    assert noun_words(nouns) == noun_words(tokens)
    assert [w for i, w in enumerate(others) if i in nouns_adj] == [w for i, w in enumerate(tokens) if i in nouns_adj]
    assert [sorted(within[i : i + 3]) for i in range(0, len(tokens), 3)] == [sorted(tokens[i : i + 3]) for i in range(0, len(tokens), 3)]
    units = [tuple(tokens[i : i + 3]) for i in range(0, len(tokens), 3)]
    rebuilt, rest = [], trigrams
    while rest:  # the shuffled sentence is the trigrams in some order
        unit = next(u for u in units if tuple(rest[: len(u)]) == u and u not in rebuilt)
        rebuilt.append(unit)
        rest = rest[len(unit):]
    assert sorted(rebuilt) == sorted(units)


def test_order_sets_rank_the_caption_first_with_ties_to_it(tmp_path):
    solid(tmp_path / "coco" / "val2014" / "COCO_val2014_000000000001.jpg", "red")
    solid(tmp_path / "coco" / "val2014" / "COCO_val2014_000000000002.jpg", "blue")
    (tmp_path / "coco" / "coco_karpathy_test.json").write_text(json.dumps([
        {"image": "val2014/COCO_val2014_000000000001.jpg", "caption": ["A red car near a blue house.", "Red paint on a wall."]},
        {"image": "val2014/COCO_val2014_000000000002.jpg", "caption": ["A red car near a blue house."]},
    ]))
    solid(tmp_path / "flickr30k" / "flickr30k-images" / "10.jpg", "red")
    (tmp_path / "flickr30k" / "flickr30k_test.json").write_text(json.dumps([
        {"image": "flickr30k-images/10.jpg", "caption": ["A dog runs on green grass", "A man in a shirt that is red."]}]))
    bench = REGISTRY["aro_order"]
    # The colour model counts words, and a perturbation keeps a caption's words: every option ties the true caption, and
    # the official rule gives the tie to it. Unless the options are not cleaned: the raw "red." is no colour word, while
    # the perturbations split it off as spaCy's tokens ("red ."), and win.
    for preprocess, expected in ((True, {"coco_order": 1.0, "flickr30k_order": 1.0}), (False, {"coco_order": 1.0, "flickr30k_order": 0.5})):
        result = run("aro_order", tmp_path, preprocess=preprocess)
        assert result.complete and {s: result.metrics[s]["acc"] for s in expected} == expected
        for split in expected:  # and by brute force: the cosine of each option's colour counts with the image's colour
            hits = []
            for image, options in bench.examples(tmp_path, split, bench.Options(preprocess=preprocess)):
                colour = np.asarray(Image.open(image).convert("RGB"))[0, 0] > 127
                scores = [float(np.dot(colour, v) / (np.linalg.norm(v) * np.linalg.norm(colour))) if any(v) else 0.0
                          for v in ([o.split().count(w) for w in WORDS] for o in options)]
                hits.append(scores[0] >= max(scores[1:]))  # argmax, true caption first: a tie goes to it
            assert expected[split] == sum(hits) / len(hits)
    options = bench.examples(tmp_path, "flickr30k_order", bench.Options())[1][1]
    assert options[0] == "a man in a shirt that is red" and all(o == o.lower() and "." not in o for o in options)  # pre_caption
    assert run("aro_order", tmp_path, "strict").metrics["flickr30k_order"]["acc"] == 0.0  # strict: the ties are wrong


# ---- zero-shot: prompt ensembles, CLIP_benchmark's files ----------------------------------------------------------


def ensemble(prompts_per_class):
    """normalise(mean over prompts of normalise(text embedding)), written out with NumPy."""
    rows = []
    for prompts in prompts_per_class:
        e = np.array([[p.lower().split().count(w) for w in WORDS] for p in prompts], dtype=np.float64)
        e = e / np.linalg.norm(e, axis=1, keepdims=True)
        rows.append(e.mean(0) / np.linalg.norm(e.mean(0)))
    return np.stack(rows)


def strict_accuracy(images, weights, labels) -> float:
    """Top-1 accuracy of cosine scores where the right class must score strictly above every other."""
    scores = (images / np.linalg.norm(images, axis=1, keepdims=True)) @ weights.T
    return float(np.mean([all(row[y] > v for j, v in enumerate(row) if j != y) for row, y in zip(scores, labels, strict=True)]))


def test_zeroshot_ensembles_prompts_that_embed_differently(tmp_path):
    base = tmp_path / "zeroshot" / "colours"
    images = {"0_red": ["red", "yellow"], "1_green": ["green", "yellow"], "2_blue": ["blue", "green"]}
    for folder, colours in images.items():
        for k, colour in enumerate(colours):
            solid(base / folder / f"{k}.png", colour)
    (base / "classnames.txt").write_text("red\ngreen\nblue\n")
    templates = ["a {} photo.", "a {c} photo with green green green paint.", "{} and red"]  # open_clip's {} and CLIP_benchmark's {c}
    (base / "templates.txt").write_text("\n".join(templates) + "\n")
    result = run("zeroshot", tmp_path)
    names = ["red", "green", "blue"]
    weights = ensemble([[t.replace("{c}", "{}").format(n) for t in templates] for n in names])
    pixels = np.array([COLOURS[c] for cs in images.values() for c in cs], dtype=np.float64) > 127
    labels = [0, 0, 1, 1, 2, 2]
    expected = strict_accuracy(pixels, weights, labels)
    assert 0 < expected < 1  # some right, some wrong
    m = result.metrics["colours"]
    assert (m["acc"], m["n"], m["classes"], m["prompts"]) == (pytest.approx(expected), 6, 3, 9)
    assert m["templates_from"] == str(base / "templates.txt") and m["classnames_from"] == str(base / "classnames.txt")
    right = [all(row[y] > v for j, v in enumerate(row) if j != y) for row, y in zip(
        (pixels / np.linalg.norm(pixels, axis=1, keepdims=True)) @ weights.T, labels, strict=True)]
    assert m["acc1"] == m["acc"] and math.isnan(m["acc5"])  # CLIP_benchmark's keys: no top-5 under 5 classes, as there
    assert m["mean_per_class_recall"] == pytest.approx(np.mean([np.mean(right[2 * c:2 * c + 2]) for c in range(3)]))
    assert result.metrics["acc1"] == m["acc1"]  # the record's top level: what `clip_benchmark build` puts in its row

    cb = tmp_path / "cb"  # CLIP_benchmark's files as they are: keyed by dataset, {c} templates, class-specific (CuPL) prompts
    cb.mkdir()
    (cb / "classnames.json").write_text(json.dumps({"colours": ["red", "green", "blue"]}))
    (cb / "templates.json").write_text(json.dumps({"imagenet1k": ["a {c} photo."]}))
    cupl = {"colours": {"red": ["a red thing", "red red"], "green": ["green"], "blue": ["blue", "a blue and green thing"]}}
    (cb / "cupl.json").write_text(json.dumps(cupl))
    fallback = run("zeroshot", tmp_path, classnames=str(cb / "classnames.json"), templates=str(cb / "templates.json")).metrics["colours"]
    assert fallback["templates_from"] == f"{cb / 'templates.json'}[imagenet1k]" and fallback["prompts"] == 3
    assert fallback["acc"] == 3 / 6  # one prompt each: the yellow images tie red and green (strict: wrong), the green "blue" is green
    per_class = run("zeroshot", tmp_path, templates=str(cb / "cupl.json")).metrics["colours"]
    expected = strict_accuracy(pixels, ensemble(cupl["colours"].values()), labels)
    assert per_class["acc"] == pytest.approx(expected) and per_class["prompts"] == 5
    del cupl["colours"]["green"]
    (cb / "short.json").write_text(json.dumps(cupl))  # class-specific prompts that leave a class out: no class scored without any
    with pytest.raises(ValueError, match=r"short.json\[colours\]: no prompts for classes \['green'\]"):
        run("zeroshot", tmp_path, templates=str(cb / "short.json"))
    (base / "templates.txt").write_text("a {0} {x} photo\n")
    with pytest.raises(ValueError, match=r"templates.txt: template 'a \{0\} \{x\} photo' has a placeholder other than"):
        run("zeroshot", tmp_path)
    (base / "classnames.txt").write_text("red\ngreen\n")
    with pytest.raises(ValueError, match="3 class folders but 2 class names"):
        run("zeroshot", tmp_path)


def test_clip_benchmark_zeroshot_figures_against_brute_force():
    from compclip.eval import protocols
    from compclip.eval.benchmarks.zeroshot import clip_benchmark_metrics

    torch.manual_seed(0)
    scores, target = torch.randn(40, 7), torch.tensor([i % 7 for i in range(33)] + [0] * 7)  # unbalanced classes
    correct = protocols.picks(scores, target, "clip_benchmark")
    got = clip_benchmark_metrics(scores, target, correct)
    rows = scores.tolist()
    ranked = [sorted(range(7), key=lambda j: -row[j]) for row in rows]
    assert got["acc1"] == pytest.approx(np.mean([r[0] == y for r, y in zip(ranked, target.tolist(), strict=True)]))
    assert got["acc5"] == pytest.approx(np.mean([y in r[:5] for r, y in zip(ranked, target.tolist(), strict=True)]))
    per_class = {}
    for r, y in zip(ranked, target.tolist(), strict=True):
        per_class.setdefault(y, []).append(r[0] == y)
    assert got["mean_per_class_recall"] == pytest.approx(np.mean([np.mean(v) for v in per_class.values()]))


# ---- retrieval: Karpathy JSON, CLIP_benchmark's files, long captions ------------------------------------------------

# three images; the red one has a second caption that names blue: by hand, with strict ties,
# text->image R@1 3/4 (the blue caption ranks the red image third), image->text R@1 2/3 (the blue image ties its
# own caption with "a blue dog"); R@5 1 both ways; under CLIP_benchmark's ties image->text R@1 is 1
CAPTIONS = {"red": ["a red dog", "a blue dog"], "green": ["a happy, green cat"], "blue": ["a blue car"]}
EXPECTED = {"image_retrieval_recall@1": 0.75, "text_retrieval_recall@1": pytest.approx(2 / 3), "image_retrieval_recall@5": 1.0,
            "text_retrieval_recall@5": 1.0, "images": 3, "captions": 4}


def test_retrieval_reads_karpathy_and_clip_benchmark_layouts(tmp_path):
    root = tmp_path / "retrieval"
    # Flickr30k's Karpathy file (no filepath) with the images as its archive extracts them
    images = [{"filename": f"{i}.jpg", "split": "test", "sentences": [{"raw": c} for c in CAPTIONS[colour]]} for i, colour in
              enumerate(CAPTIONS)]
    # Karpathy's other splits, images present: a test set is its `test` entries only
    images += [{"filename": f"{9 + k}.jpg", "split": split, "sentences": [{"raw": f"a red {split} dog"}]}
               for k, split in enumerate(("train", "val", "restval"))]
    (root / "f30k").mkdir(parents=True)
    (root / "f30k" / "dataset_flickr30k.json").write_text(json.dumps({"images": images}))
    # CLIP_benchmark's mscoco_captions: COCO caption format beside val2014/
    coco = {"images": [{"id": 10 + i, "file_name": f"COCO_val2014_{i}.jpg"} for i in range(3)],
            "annotations": [{"image_id": 10 + i, "caption": c} for i, colour in enumerate(CAPTIONS) for c in CAPTIONS[colour]]}
    (root / "coco").mkdir()
    (root / "coco" / "coco_test_karpathy.json").write_text(json.dumps(coco))
    # CLIP_benchmark's flickr8k: a header line, then name.jpg,caption (commas inside the caption)
    # (without the red image's blue caption: every answer right, so the datasets' recalls differ)
    lines = ["image,caption", *(f"{i}.jpg,{c}" for i, colour in enumerate(CAPTIONS) for c in CAPTIONS[colour] if c != "a blue dog")]
    (root / "f8k").mkdir()
    (root / "f8k" / "flickr8k_test_karpathy.txt").write_text("\n".join(lines) + "\n")
    for i, colour in enumerate(CAPTIONS):
        solid(root / "f30k" / "flickr30k-images" / f"{i}.jpg", colour)
        solid(root / "coco" / "val2014" / f"COCO_val2014_{i}.jpg", colour)
        solid(root / "f8k" / f"{i}.jpg", colour)
    for k in range(3):
        solid(root / "f30k" / "flickr30k-images" / f"{9 + k}.jpg", "red")
    result = run("retrieval", tmp_path)
    assert result.complete
    for folder, layout in (("f30k", "dataset_flickr30k.json"), ("coco", "coco_test_karpathy.json")):
        m = result.metrics[folder]
        assert {k: m[k] for k in EXPECTED} == EXPECTED and m["layout"] == layout, folder
    f8k = result.metrics["f8k"]
    assert (f8k["image_retrieval_recall@1"], f8k["text_retrieval_recall@1"], f8k["captions"]) == (1.0, 1.0, 3)
    # the number the card and the quick tour print: each dataset's two directions averaged, then the datasets
    assert result.metrics["mean_recall@1"] == pytest.approx(((0.75 + 2 / 3) / 2 * 2 + 1.0) / 3)
    assert result.metrics["mean_recall@5"] == 1.0
    assert run("retrieval", tmp_path, "clip_benchmark").metrics["coco"]["text_retrieval_recall@1"] == 1.0


def test_retrieval_holds_a_photo_reached_twice_through_a_folder_linked_into_itself_once(tmp_path, caplog):
    """`images/sub -> .`: `sub/red.png` is `red.png` by another name. The gallery holds the file once, both its captions
    owning it, so every answer is right (3 images, 6 captions, by hand); as two images they tied, and the twin beat
    each caption's own image under strict ties. One line says how many names were folded."""
    folder = tmp_path / "retrieval" / "loop"
    for colour in ("red", "green", "blue"):
        solid(folder / "images" / f"{colour}.png", colour)
    (folder / "images" / "sub").symlink_to(".")
    (folder / "captions.csv").write_text("image,caption\nred.png,a red dog\nred.png,a red ball\nsub/red.png,a red thing\n"
                                         "green.png,a green cat\nsub/sub/blue.png,a blue car\nblue.png,a blue sky\n")
    with caplog.at_level("WARNING", logger="compclip.eval"):
        result = run("retrieval", tmp_path)
    m = result.metrics["loop"]
    assert (m["images"], m["captions"]) == (3, 6) and result.complete
    assert all(m[f"{d}_retrieval_recall@1"] == 1.0 for d in ("image", "text")), m
    assert [r.getMessage() for r in caplog.records] == [
        f"retrieval/loop: 2 image name(s) reach a file another name reached first ({folder / 'images' / 'sub' / 'red.png'} is "
        f"{folder / 'images' / 'red.png'}): each file is one gallery image"]


def flair_pieces(text):
    """FLAIR's split_caption written out by hand: cut at every newline, full stop and `</s>`, strip, drop empty pieces."""
    pieces, current, i = [], "", 0
    while i < len(text):
        if text.startswith("</s>", i) or text[i] in "\n.":
            pieces.append(current)
            current, i = "", i + (4 if text.startswith("</s>", i) else 1)
        else:
            current, i = current + text[i], i + 1
    return [p.strip() for p in [*pieces, current] if p.strip()]


def test_retrieval_reads_flairs_fine_grained_files_and_splits_long_captions_as_flair(tmp_path):
    """C2LIP's DOCCI and IIW columns: FLAIR's pre-split test_annotations.json (DOCCI's in annotations/ with images/, IIW's
    beside its docci/ images), and a long_captions.jsonl split as FLAIR's split_caption splits (or by compclip's sentence
    rule, the named variant)."""
    from compclip.eval.benchmarks.retrieval import load_pairs

    root = tmp_path / "retrieval"
    for colour in ("red", "blue"):
        solid(root / "docci" / "images" / f"test_{colour}.jpg", colour)
        solid(root / "iiw" / "docci" / f"test_{colour}.jpg", colour)
        solid(root / "long" / "images" / f"{colour}.png", colour)
    sentences = {"red": ["A red square", "It fills the frame", "nothing blue"], "blue": ["A blue square", "Nothing red"]}
    anns = [{"image_id": i, "image": f"test_{c}.jpg", "caption": s, "caption_id": 10 * i + k}
            for i, c in enumerate(sentences) for k, s in enumerate(sentences[c])]
    (root / "docci" / "annotations").mkdir()
    (root / "docci" / "annotations" / "test_annotations.json").write_text(json.dumps({"annotations": anns}))
    (root / "iiw" / "test_annotations.json").write_text(json.dumps({"annotations": [{**a, "image": "docci/" + a["image"]} for a in anns]}))
    long = {"red": "A red square.\nIt fills the frame! Nothing else is red</s>Size 3.5 cm.", "blue": "A blue square. \n\n. Plain"}
    records = [json.dumps({"image": f"{c}.png", "caption": t}) for c, t in long.items()]
    (root / "long" / "long_captions.jsonl").write_text("\n".join(records) + "\n")
    result = run("retrieval", tmp_path)
    assert result.complete
    for name, layout in (("docci", "test_annotations.json"), ("iiw", "test_annotations.json")):
        m = result.metrics[name]
        assert (m["layout"], m["images"], m["captions"]) == (layout, 2, 5)
        # a caption naming its own colour ranks its image first; "It fills the frame" ties both (strict: a miss at 1, hit
        # at 5); "nothing blue" names blue: its red image ranks second; "Nothing red" likewise
        assert m["image_retrieval_recall@1"] == pytest.approx(2 / 5) and m["image_retrieval_recall@5"] == 1.0
    pairs = load_pairs(root / "long" / "long_captions.jsonl")
    assert [c for _, c in pairs] == flair_pieces(long["red"]) + flair_pieces(long["blue"])
    assert [c for _, c in pairs] == ["A red square", "It fills the frame! Nothing else is red", "Size 3", "5 cm", "A blue square", "Plain"]
    assert result.metrics["long"]["captions"] == 6
    compclip_rule = REGISTRY["retrieval"].Options(sentences="compclip")
    assert [c for _, c in load_pairs(root / "long" / "long_captions.jsonl", compclip_rule)][:3] == [
        "A red square.", "It fills the frame!", "Nothing else is red</s>Size 3.5 cm."]


def aro_pre_caption(caption, max_words=30):
    """ARO's pre_caption written out by hand: lower case; each of .!"()*#:;~ a space; a run of two or more white-space
    characters one space; a trailing newline and the spaces at both ends dropped; the first max_words words."""
    out, run_ = [], []
    for ch in caption.lower():
        ch = " " if ch in '.!"()*#:;~' else ch
        if ch.isspace():
            run_.append(ch)
            continue
        if run_:
            out.append(run_[0] if len(run_) == 1 else " ")
            run_ = []
        out.append(ch)
    if run_:
        out.append(run_[0] if len(run_) == 1 else " ")
    text = "".join(out).rstrip("\n").strip(" ")
    words = text.split(" ")
    return " ".join(words[:max_words])


def test_retrieval_pre_caption_is_aros_on_blips_karpathy_files(tmp_path):
    """CLIC's retrieval: BLIP's coco_karpathy_test.json and flickr30k_test.json (`image` paths relative to the folder, a
    list of captions each), every caption through ARO's pre_caption with 30 words; raw captions are the default."""
    from compclip.eval.benchmarks.retrieval import load_pairs, pre_caption

    root = tmp_path / "retrieval"
    long = " ".join(f"word{i}" for i in range(40)) + " blue"
    captions = {"red": ["A RED dog!!  Sits (left)", "Red: #1 ~ red."], "blue": ["a blue\tcar;"]}
    (root / "coco").mkdir(parents=True)
    (root / "coco" / "coco_karpathy_test.json").write_text(json.dumps(
        [{"image": f"val2014/COCO_val2014_{c}.jpg", "caption": caps, "image_id": c} for c, caps in captions.items()]))
    (root / "f30k").mkdir()
    (root / "f30k" / "flickr30k_test.json").write_text(json.dumps(
        [{"image": f"flickr30k-images/{c}.jpg", "caption": caps} for c, caps in {"red": "a red kite", "blue": [long]}.items()]))
    for colour in captions:
        solid(root / "coco" / "val2014" / f"COCO_val2014_{colour}.jpg", colour)
        solid(root / "f30k" / "flickr30k-images" / f"{colour}.jpg", colour)
    every = [c for caps in captions.values() for c in caps]
    for text in [*every, long, "a\n", "  two  spaces\t\tand tabs ", "x" * 3, "end.\n\n"]:
        assert pre_caption(text) == aro_pre_caption(text), text
    options = REGISTRY["retrieval"].Options(captions="pre_caption")
    assert [c for _, c in load_pairs(root / "coco" / "coco_karpathy_test.json", options)] == [aro_pre_caption(c) for c in every]
    assert [c for _, c in load_pairs(root / "coco" / "coco_karpathy_test.json")] == every
    assert [c for _, c in load_pairs(root / "f30k" / "flickr30k_test.json", options)][1] == " ".join(f"word{i}" for i in range(30))
    raw, cut = run("retrieval", tmp_path).metrics, run("retrieval", tmp_path, captions="pre_caption").metrics
    assert raw["coco"]["layout"] == "coco_karpathy_test.json" and (raw["coco"]["images"], raw["coco"]["captions"]) == (2, 3)
    # "Red: #1 ~ red." names no colour as a word until pre_caption drops its marks; the long blue caption names blue after
    # its 40th word, which pre_caption cuts away (a tie: strict counts a miss)
    assert raw["coco"]["image_retrieval_recall@1"] == pytest.approx(2 / 3) and cut["coco"]["image_retrieval_recall@1"] == 1.0
    assert raw["f30k"]["image_retrieval_recall@1"] == 1.0 and cut["f30k"]["image_retrieval_recall@1"] == 0.5
    assert raw["f30k"]["layout"] == "flickr30k_test.json"


def test_retrieval_reads_coco_val2017s_own_caption_file(tmp_path):
    """Rösch et al.'s T2I R@5 is on COCO val2017: captions_val2017.json in the folder (or its annotations/, FLAIR's
    layout), images in val2017/ (or images/val2017/); the real file gives its 5,000 images and 25,014 captions."""
    from compclip.eval.benchmarks.retrieval import layout_file, load_pairs
    from conftest import shared_data

    folder = tmp_path / "retrieval" / "coco_val2017"
    (folder / "annotations").mkdir(parents=True)
    (folder / "annotations" / "captions_val2017.json").symlink_to(shared_data("coco", "captions_val2017.json"))
    pairs = load_pairs(layout_file(folder))
    assert len(pairs) == 25014 and len({p for p, _ in pairs}) == 5000
    assert all(p.parent == folder / "val2017" and p.name.endswith(".jpg") for p, _ in pairs)
    mini = tmp_path / "mini" / "retrieval" / "coco_val2017"
    (mini / "annotations").mkdir(parents=True)
    (mini / "annotations" / "captions_val2017.json").write_text(json.dumps({
        "images": [{"id": 2, "file_name": "000000000002.jpg"}, {"id": 1, "file_name": "000000000001.jpg"}],
        "annotations": [{"image_id": 1, "caption": "a red kite"}, {"image_id": 2, "caption": "a blue kite"},
                        {"image_id": 1, "caption": "red and blue"}]}))
    solid(mini / "images" / "val2017" / "000000000001.jpg", "red")
    solid(mini / "images" / "val2017" / "000000000002.jpg", "blue")
    m = run("retrieval", tmp_path / "mini").metrics["coco_val2017"]
    assert (m["layout"], m["images"], m["captions"]) == ("captions_val2017.json", 2, 3)
    assert m["image_retrieval_recall@1"] == pytest.approx(2 / 3)  # "red and blue" ties both images: strict counts a miss


def test_zeroshot_at_exactly_five_classes_with_a_class_no_image_has(tmp_path):
    """CLIP_benchmark's figures at the boundary: top-5 is defined from 5 classes on (here it is every class, so 1.0); the
    mean per-class recall runs over the classes that have images (sklearn's balanced accuracy leaves out a class only
    predicted); with one dataset the record's top level holds its figures, where `clip_benchmark build` reads them."""
    base = tmp_path / "zeroshot" / "five"
    images = {"0_red": ["red", "yellow", "blue"], "1_green": ["green"], "2_blue": ["blue", "green"], "3_rg": ["yellow"], "4_gb": []}
    for folder, colours in images.items():
        (base / folder).mkdir(parents=True)
        for k, colour in enumerate(colours):
            solid(base / folder / f"{k}.png", colour)
    names = ["red", "green", "blue", "red green", "green blue"]
    (base / "classnames.txt").write_text("\n".join(names) + "\n")
    (base / "templates.txt").write_text("{}\n")
    result = run("zeroshot", tmp_path)
    m = result.metrics["five"]
    weights = ensemble([[n] for n in names])
    pixels = np.array([COLOURS[c] for cs in images.values() for c in cs], dtype=np.float64) > 127
    labels = [label for label, cs in enumerate(images.values()) for _ in cs]
    scores = (pixels / np.linalg.norm(pixels, axis=1, keepdims=True)) @ weights.T
    right = [all(row[y] > v for j, v in enumerate(row) if j != y) for row, y in zip(scores, labels, strict=True)]
    recall = [np.mean([r for r, y in zip(right, labels, strict=True) if y == c]) for c in sorted(set(labels))]
    assert (m["classes"], m["n"]) == (5, 7) and 0 < np.mean(right) < 1
    assert m["acc1"] == pytest.approx(np.mean(right)) and m["acc5"] == 1.0
    assert m["mean_per_class_recall"] == pytest.approx(np.mean(recall)) and len(recall) == 4
    assert {k: result.metrics[k] for k in ("acc1", "acc5", "mean_per_class_recall")} == {
        k: m[k] for k in ("acc1", "acc5", "mean_per_class_recall")}


def test_zeroshot_subset_is_clics_seeded_draw_and_imagenet_stays_whole(tmp_path):
    """CLIC's ZS-10: each dataset's images in torchvision ImageFolder order, shuffled by np.random.shuffle after
    np.random.seed(1), the first 1,000 scored (here 5 of 12); ImageNet is scored whole."""
    truth = {"0_red": ["red", "red", "blue", "green"], "1_green": ["green", "red", "green", "green"],
             "2_blue": ["blue", "blue", "red", "blue"]}
    for dataset in ("colours", "imagenet"):
        for folder, colours in truth.items():
            for k, colour in enumerate(colours):
                solid(tmp_path / "zeroshot" / dataset / folder / f"{k}.png", colour)
        (tmp_path / "zeroshot" / dataset / "classnames.txt").write_text("red\ngreen\nblue\n")
        (tmp_path / "zeroshot" / dataset / "templates.txt").write_text("{}\n")
    right = [colour == folder[2:] for folder, colours in truth.items() for colour in colours]  # the model names each colour
    np.random.seed(1)  # as CLIC's zero_shot_classifications, then eval_utils.shuffle_and_select
    indices = list(range(12))
    np.random.shuffle(indices)
    chosen = indices[:5]
    m = run("zeroshot", tmp_path, subset=5).metrics
    assert (m["colours"]["n"], m["colours"]["subset"], m["colours"]["subset_seed"]) == (5, 5, 1)
    assert m["colours"]["acc"] == pytest.approx(sum(right[i] for i in chosen) / 5)
    assert m["imagenet"]["n"] == 12 and "subset" not in m["imagenet"] and m["imagenet"]["acc"] == pytest.approx(sum(right) / 12)
    # what `report --paper` compares with CLIC's draw: the order drawn over, where names and prompts came from
    assert m["colours"]["subset_order"] == "class folders, then file names" and "subset_order" not in m["imagenet"]
    assert (m["colours"]["classnames_source"], m["colours"]["templates_source"]) == ("dataset file", "dataset file")
    assert (m["imagenet"]["classnames_source"], m["imagenet"]["templates_source"]) == ("dataset file", "dataset file")
    # each kind of source: a CLIP_benchmark JSON given (one dataset in it), the dataset's file, ImageNet's bundled lists,
    # the folders' names
    (tmp_path / "names.json").write_text(json.dumps({"colours": ["red", "green", "blue"]}))
    given = run("zeroshot", tmp_path, classnames=str(tmp_path / "names.json")).metrics
    assert [given[d]["classnames_source"] for d in ("colours", "imagenet")] == ["clip_benchmark json", "dataset file"]
    assert given["colours"]["classnames_from"] == f"{tmp_path / 'names.json'}[colours]"
    for dataset in ("colours", "imagenet"):
        for file in ("classnames.txt", "templates.txt"):
            (tmp_path / "zeroshot" / dataset / file).rename(tmp_path / f"{dataset}-{file}")
    (tmp_path / "zeroshot" / "imagenet" / "classnames.txt").write_text("red\ngreen\nblue\n")
    bare = run("zeroshot", tmp_path).metrics
    assert [(bare[d]["classnames_source"], bare[d]["templates_source"]) for d in ("colours", "imagenet")] == [
        ("folder names", "imagenet"), ("dataset file", "imagenet")]
    for dataset in ("colours", "imagenet"):
        for file in ("classnames.txt", "templates.txt"):
            (tmp_path / f"{dataset}-{file}").replace(tmp_path / "zeroshot" / dataset / file)
    other = run("zeroshot", tmp_path, subset=5, subset_seed=2, subset_skip="").metrics
    np.random.seed(2)
    np.random.shuffle(indices := list(range(12)))
    assert other["imagenet"]["acc"] == pytest.approx(sum(right[i] for i in indices[:5]) / 5) and other["imagenet"]["n"] == 5
    assert run("zeroshot", tmp_path).metrics["colours"]["n"] == 12


# ---- concept ranking ---------------------------------------------------------------------------------------------


def test_concept_ranking_permutes_one_keyword(tmp_path):
    coco = tmp_path / "coco"
    solid(coco / "val2017" / "1.jpg", "red")
    solid(coco / "val2017" / "2.jpg", "blue")
    solid(coco / "val2017" / "3.jpg", "green")
    (coco / "captions_val2017.json").write_text(json.dumps({
        "images": [{"id": 1, "file_name": "1.jpg"}, {"id": 2, "file_name": "2.jpg"}, {"id": 3, "file_name": "3.jpg"}],
        "annotations": [{"image_id": 1, "caption": "A Red car on a road."}, {"image_id": 2, "caption": "a blue bus"},
                        {"image_id": 3, "caption": "a red truck"}],  # the green image's caption is wrong: "a green truck" wins
    }))
    bench = REGISTRY["concept_ranking"]
    examples = bench.examples(tmp_path)
    assert sorted(len(opts) for _, opts in examples["color"]) == [9, 9, 9]  # the true caption and 8 other colours
    first = next(opts for f, opts in examples["color"] if f == "1.jpg")
    assert first[0] == "A Red car on a road." and "A Blue car on a road." in first  # case kept
    assert bench.examples(tmp_path, ("size", "color"))["color"] == examples["color"]  # one class draws alone what it draws in all
    result = run("concept_ranking", tmp_path)
    assert result.metrics["color"] == {"acc": pytest.approx(2 / 3), "n": 3, "options": 9}  # every caption, as the paper's subsets
    drawn = bench.examples(tmp_path, ("color",), limit=2)["color"]
    assert len(drawn) == 2 and all(e in examples["color"] for e in drawn)
    assert run("concept_ranking", tmp_path, max_per_class=2).metrics["color"]["n"] == 2


# ---- a scorer that is not a dual encoder -------------------------------------------------------------------------


class PairwiseScorer(Scorer):
    """A scorer that is not a dual encoder as far as the benchmarks can tell: it scores each pair on its own
    (as OC-CLIP's graph-conditioned score does) and has no text-to-text score."""

    def __init__(self):
        self.embed = scorer()  # the colour model's exact embeddings, looked up one pair at a time
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


def test_blind_scores_the_texts_against_the_mean_image_by_hand(tmp_path):
    """Images red, red, blue: their mean embedding is (2, 0, 1)/√5. Blind, "red" scores 2, "blue" 1 and "green" 0 against
    every image: the first two examples stay right, the third (a blue image) goes to its red negative."""
    for name, colour in (("1.jpg", "red"), ("2.jpg", "red"), ("3.jpg", "blue")):
        solid(tmp_path / "coco" / "val2017" / name, colour)
    (tmp_path / "sugarcrepe").mkdir()
    rows = {"0": {"filename": "1.jpg", "caption": "a red car", "negative_caption": "a blue car"},
            "1": {"filename": "2.jpg", "caption": "a red box", "negative_caption": "a green box"},
            "2": {"filename": "3.jpg", "caption": "a blue ball", "negative_caption": "a red ball"}}
    (tmp_path / "sugarcrepe" / "swap_att.json").write_text(json.dumps(rows))
    bench, judge = REGISTRY["sugarcrepe"], scorer()
    with judge.asked() as asked:
        real = bench.run(judge, tmp_path, "strict").metrics["swap_att"]["acc"]
    assert len(asked) == 3
    with judge.blind(asked):
        blind = bench.run(judge, tmp_path, "strict").metrics["swap_att"]["acc"]
        assert torch.allclose(judge.images([tmp_path / "coco" / "val2017" / "3.jpg"])[0], torch.tensor([2.0, 0, 1]) / math.sqrt(5))
    assert (real, blind) == (1.0, pytest.approx(2 / 3))
    assert judge.images([tmp_path / "coco" / "val2017" / "3.jpg"]).tolist() == [[0.0, 0.0, 1.0]]  # the block over, images are themselves


def test_sugarcrepe_scores_the_split_files_present_and_names_the_others(tmp_path):
    solid(tmp_path / "coco" / "val2017" / "1.jpg", "red")
    (tmp_path / "sugarcrepe").mkdir()
    rows = {"0": {"filename": "1.jpg", "caption": "a red car", "negative_caption": "a blue car"},
            "2": {"filename": "1.jpg", "caption": "a blue car", "negative_caption": "a red car"}}  # keys may have gaps
    (tmp_path / "sugarcrepe" / "swap_att.json").write_text(json.dumps(rows))
    (tmp_path / "sugarcrepe" / "swap_obj.json").write_text(json.dumps({"0": rows["0"]}))
    result = run("sugarcrepe", tmp_path)
    assert result.metrics == {"swap_obj": {"acc": 1.0, "n": 1, "n_missing": 0}, "swap_att": {"acc": 0.5, "n": 2, "n_missing": 0},
                              "swap": 0.75, "overall": 0.75}
    assert len(result.absent) == 5 and not result.complete
    assert REGISTRY["sugarcrepe"].lacks(tmp_path, ("add_obj",)).startswith(f"looked for {tmp_path / 'sugarcrepe' / 'add_obj.json'}")


# ---- VALSE: the repository's data/*.json, validated samples, pairwise accuracy ------------------------------------------

def valse_record(image, caption, foil, votes=3):
    return {"dataset": "visual7w", "image_file": image, "linguistic_phenomena": "counting", "caption": caption, "foil": foil,
            "mturk": {"caption": votes, "foil": 3 - votes, "other": 0}}


def valse_pairwise(records, score):
    """`lxmert_valse_eval.py`'s loop, written again: a sample counts when `mturk["caption"] >= 2`, and is right (acc_r)
    when `cross_score[0, 1] > cross_score[1, 1]`: the caption's score above the foil's."""
    count = pairwise_acc = 0
    for foil in records.values():
        if foil["mturk"]["caption"] >= 2:
            if score(foil["image_file"], foil["caption"]) > score(foil["image_file"], foil["foil"]):
                pairwise_acc += 1
            count += 1
    return pairwise_acc / count


def test_valse_scores_validated_samples_by_pairwise_accuracy_and_names_what_is_absent(tmp_path):
    data = tmp_path / "valse" / "data"
    colour = {"r.jpg": "red", "b.jpg": "blue", "y.jpg": "yellow"}
    for name, c in colour.items():
        solid(data / "visual7w" / "images" / name, c)
    counting = {  # right, wrong, a tie (yellow scores red and green alike: wrong), and two the annotators did not validate
        "c0": valse_record("r.jpg", "a red car", "a blue car"), "c1": valse_record("b.jpg", "a red car", "a blue car"),
        "c2": valse_record("y.jpg", "a red car", "a green car"), "c3": valse_record("b.jpg", "a blue car", "a red car", votes=1),
        "c4": valse_record("r.jpg", "a blue car", "a red car", votes=0)}
    existence = {"e0": valse_record("r.jpg", "a red car", "a green car"), "e1": valse_record("gone.jpg", "a red car", "a blue car")}
    (data / "counting-hard.json").write_text(json.dumps(counting))
    (data / "existence.json").write_text(json.dumps(existence))
    (data / "actant-swap.json").write_text(json.dumps({"a0": {**valse_record("r.jpg", "a red car", "a blue car"), "dataset": "SWiG"}}))
    result = run("valse", tmp_path)
    bright = {"red": (1, 0, 0), "blue": (0, 0, 1), "yellow": (1, 1, 0)}

    def score(image, text):  # the colour model's cosine, by hand
        v, t = bright[colour[image]], [text.split().count(w) for w in WORDS]
        return sum(a * b for a, b in zip(v, t, strict=False)) / (math.hypot(*v) * math.hypot(*t))

    assert result.metrics["counting_hard"] == {"acc": valse_pairwise(counting, score), "n": 3, "n_missing": 0}
    assert result.metrics["counting_hard"]["acc"] == pytest.approx(1 / 3)
    assert result.metrics["existence"] == {"acc": 1.0, "n": 1, "n_missing": 1}  # gone.jpg counted missing, not wrong
    assert math.isnan(result.metrics["actant_swap"]["acc"])  # none of its images under actions/images_512: named, not 0
    assert "actions" not in result.metrics and result.metrics["counting"] == pytest.approx(1 / 3)
    assert result.metrics["overall"] == pytest.approx((1 / 3 + 1.0) / 2)  # the instruments scored, unweighted
    assert str(data / "foil-it.json") in result.absent and f"{data / 'actions' / 'images_512'} [actant_swap]" in result.absent
    assert not result.complete and len(result.missing.files) == 2
    assert REGISTRY["valse"].kind_of("relations") == "spatial" and REGISTRY["valse"].kind_of("counting_hard") == "counting"
    assert REGISTRY["valse"].kind_of("existence") == "negation" and REGISTRY["valse"].kind_of("coreference_hard") is None
    (data / "existence.json").rename(tmp_path / "valse" / "existence.json")
    for name in ("counting-hard.json", "actant-swap.json"):
        (data / name).unlink()
    said = REGISTRY["valse"].lacks(tmp_path, ())
    assert said.startswith(f"looked for {data / 'existence.json'}") and "the instrument files go in valse/data/" in said


# ---- SVO-Probes: the release's CSV, images by id, the sentence choosing between its two images ------------------------

def test_svo_probes_pairwise_scores_each_negative_kind_alone_and_all_together_as_the_notebook_subsets_them(tmp_path):
    images = tmp_path / "svo_probes" / "images"
    for image_id, c in (("1", "red"), ("2", "blue"), ("3", "red")):
        solid(images / f"{image_id}.jpg", c)
    solid(images / "4.png", "green")  # another extension under the same rule
    columns = ["sentence", "pos_triplet", "neg_triplet", "subj_neg", "verb_neg", "obj_neg", "pos_image_id", "neg_image_id",
               "pos_url", "neg_url"]
    rows = [("a red car", "True", "False", "False", 1, 2),  # subj: right
            ("a blue car", "True", "False", "False", 1, 2),  # subj: wrong
            ("a red car", "False", "True", "False", 1, 3),  # verb: two red images score "a red car" alike: a tie, wrong
            ("a green car", "False", "False", "True", 4, 1),  # obj: right (the .png)
            ("a red car", "False", "False", "True", 9, 2),  # obj: its true image is not there: missing
            ("a red car", "True", "True", "False", 1, 2),  # two kinds at once: in no subset (the notebook's filters)
            ("a red car", "False", "False", "False", 1, 2)]  # none: in no subset
    lines = [",".join(columns)] + [f"{s},x,y,{a},{b},{c},{p},{n},http://a/{p},http://a/{n}" for s, a, b, c, p, n in rows]
    (tmp_path / "svo_probes" / "svo_probes.csv").write_text("\n".join(lines) + "\n")
    result = run("svo_probes", tmp_path, rule="pairwise")
    assert result.metrics["subj"] == {"acc": 0.5, "n": 2, "n_missing": 0}
    assert result.metrics["verb"] == {"acc": 0.0, "n": 1, "n_missing": 0}
    assert result.metrics["obj"] == {"acc": 1.0, "n": 1, "n_missing": 1}
    assert result.metrics["overall"] == pytest.approx(2 / 4)  # the notebook's All: every scored row of the three, not a mean of means
    assert len(result.missing.files) == 1 and not result.complete
    chosen = [(r["image"].rsplit("/", 1)[1], r["image_2"].rsplit("/", 1)[1]) for r in result.items if r["split"] == "obj"]
    assert chosen == [("4.png", "1.jpg")]
    verb = run("svo_probes", tmp_path, splits=("verb",), ties="clip_benchmark", rule="pairwise")  # a tie right under CLIP_benchmark's
    assert verb.metrics == {"verb": {"acc": 1.0, "n": 1, "n_missing": 0}, "overall": 1.0}
    for image in images.glob("*"):
        image.unlink()
    nothing = run("svo_probes", tmp_path, rule="pairwise")
    assert math.isnan(nothing.metrics["subj"]["acc"]) and "overall" not in nothing.metrics
    assert f"{tmp_path / 'svo_probes' / 'svo_probes.csv'} [subj]" in nothing.absent
    (tmp_path / "svo_probes" / "svo_probes.csv").write_text("sentence,pos_image_id\nx,1\n")
    with pytest.raises(Exception, match=r"svo_probes.csv: no column neg_image_id, subj_neg, verb_neg, obj_neg"):
        run("svo_probes", tmp_path, rule="pairwise")


# ---- CREPE: the released CSVs, a region of a Visual Genome image, the caption ranked among its hard negatives ---------

def crepe_csv(path, negatives, rows):
    import csv as csv_module

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv_module.writer(f)
        writer.writerow(["region_id", "image_id", "x", "y", "width", "height", "caption", negatives])
        for k, (image_id, box, caption, hard) in enumerate(rows):
            writer.writerow([k, image_id, *box, caption, repr(hard)])


def one2many_rank(scores):
    """`crepe_eval_utils.get_one2many_rank` written again: where the caption (column 0) lands when the options are
    sorted by score, highest first (no ties here, so argsort's order among equals does not matter)."""
    ranking = np.argsort(-np.asarray(scores), kind="stable")
    return int(np.where(ranking == 0)[0][0])


def test_crepe_ranks_the_caption_among_its_hard_negatives_on_the_cropped_region(tmp_path):
    half = Image.new("RGB", (32, 16), COLOURS["red"])
    half.paste(Image.new("RGB", (16, 16), COLOURS["blue"]), (16, 0))  # left red, right blue
    (tmp_path / "visual_genome" / "VG_100K_2").mkdir(parents=True)
    half.save(tmp_path / "visual_genome" / "VG_100K_2" / "7.jpg")
    right, left = (16, 0, 16, 16), (0, 0, 16, 16)  # x, y, width, height
    prod = [(7, right, "a blue car", ["a red car", "a green car"]),  # the crop is blue: rank 0
            (7, left, "a blue car", ["a red car", "a red red car"]),  # red region: two reds above it, rank 2
            (8, right, "a blue car", ["a red car"])]  # image 8 is not there: missing
    crepe_csv(tmp_path / "crepe" / "prod_hard_negatives" / "swap" / "prod_vg_hard_negs_swap_complexity_4.csv", "hard_negs", prod)
    syst = [(7, left, "a red car", ["a blue car"]), (7, left, "a green car", ["a blue car"])]  # right; a tie at 0
    crepe_csv(tmp_path / "crepe" / "syst_hard_negatives" / "syst_vg_hard_negs_unseen_compounds_in_yfcc.csv", "valid_hard_negs_comp",
              syst)
    result = run("crepe", tmp_path, splits=("prod_swap_4", "prod_swap_5"))
    colour_of = {right: (0, 0, 1), left: (1, 0, 0)}

    def score(box, text):
        t = [text.split().count(w) for w in WORDS]
        return sum(a * b for a, b in zip(colour_of[box], t, strict=True)) / math.hypot(*t)

    ranks = [one2many_rank([score(box, o) for o in [caption, *hard]]) for _, box, caption, hard in prod[:2]]
    assert ranks == [0, 2]
    assert result.metrics["prod_swap_4"] == {"acc": 0.5, "recall@1": 0.5, "recall@3": 1.0, "recall@5": 1.0, "recall@10": 1.0,
                                            "n": 2, "n_missing": 1}
    assert result.metrics["prod_swap"] == 0.5 and str(tmp_path / "crepe" / "prod_hard_negatives" / "swap" /
                                                        "prod_vg_hard_negs_swap_complexity_5.csv") in result.absent
    assert REGISTRY["crepe"].kind_of("prod_swap_4") == "relation" and REGISTRY["crepe"].kind_of("syst_seen_comp") == "attribute"
    assert REGISTRY["crepe"].kind_of("prod_negate_7") == "negation"
    syst_result = run("crepe", tmp_path, splits=("syst_unseen_comp",), pretraining="yfcc")
    assert syst_result.metrics["syst_unseen_comp"]["acc"] == 0.5  # the tie ranks the caption below its rival (strict)
    tied = run("crepe", tmp_path, splits=("syst_unseen_comp",), ties="clip_benchmark", pretraining="yfcc")
    assert tied.metrics["syst_unseen_comp"]["acc"] == 1.0  # and above it under CLIP_benchmark's rule
    cc12m = run("crepe", tmp_path, splits=("syst_unseen_comp",))  # the default pretraining's file is not there: named
    assert "syst_unseen_comp" not in cc12m.metrics and any(k.endswith("_in_cc12m.csv") for k in cc12m.absent)
    with pytest.raises(Exception, match=r"crepe.pretraining must be one of cc12m, yfcc, laion"):
        REGISTRY["crepe"].Options(pretraining="openai")


# ---- SPEC: a subset's image2text.json and text2image.json, argmax over the candidates both ways ------------------------

def test_spec_scores_both_directions_by_the_releases_argmax_and_averages_the_subsets(tmp_path):
    count = tmp_path / "spec" / "count"
    for c in ("red", "blue", "yellow", "green"):
        solid(count / "images" / f"{c}.jpg", c)
    i2t = [{"query": "images/red.jpg", "keys": ["a blue car", "a red car", "a green car"], "label": 1},  # right
           {"query": "images/yellow.jpg", "keys": ["a red car", "a green car"], "label": 1},  # a tie the argmax gives to 0: wrong
           {"query": "images/yellow.jpg", "keys": ["a red car", "a green car"], "label": 0},  # the same tie, to its label: right
           {"query": "images/gone.jpg", "keys": ["a red car", "a blue car"], "label": 0}]  # missing
    t2i = [{"query": "a red car", "keys": ["images/blue.jpg", "images/red.jpg", "images/yellow.jpg"], "label": 1},  # right
           {"query": "a green car", "keys": ["images/red.jpg", "images/blue.jpg"], "label": 0}]  # 0 and 0: a tie to 0, right
    (count / "image2text.json").write_text(json.dumps(i2t))
    (count / "text2image.json").write_text(json.dumps(t2i))
    bright = {"red": (1, 0, 0), "blue": (0, 0, 1), "yellow": (1, 1, 0), "green": (0, 1, 0)}

    def score(image, text):
        v, t = bright[image.rsplit("/", 1)[1][:-4]], [text.split().count(w) for w in WORDS]
        return sum(a * b for a, b in zip(v, t, strict=False)) / (math.hypot(*v) * math.hypot(*t))

    def release(samples, i2t_side):  # clip_wrapper's loop: argmax over each sample's candidates against its label
        right = [int(np.argmax([score(s["query"], k) if i2t_side else score(k, s["query"]) for k in s["keys"]]) == s["label"])
                 for s in samples]
        return sum(right) / len(right)

    bench = REGISTRY["spec"]
    result = bench.run(scorer(), tmp_path, bench.ties)
    assert result.metrics["count"] == {"i2t": release(i2t[:3], True), "t2i": release(t2i, False), "n_i2t": 3, "n_t2i": 2,
                                       "n_missing": 1}
    assert result.metrics["count"]["i2t"] == pytest.approx(2 / 3) and result.metrics["count"]["t2i"] == 1.0
    assert result.metrics["i2t"] == pytest.approx(2 / 3) and len(result.absent) == 10  # five subsets absent, two files each
    strict = run("spec", tmp_path, ties="strict")  # (and every item row agrees with its own scores)
    assert strict.metrics["count"]["i2t"] == pytest.approx(1 / 3) and strict.metrics["count"]["t2i"] == 0.5
    rows = {(r["split"], r["item"]): r for r in strict.items}
    assert rows["count_t2i", "0"]["image"].endswith("red.jpg") and rows["count_t2i", "0"]["image_2"].endswith("yellow.jpg")
    assert rows["count_i2t", "0"]["true"] == "a red car" and rows["count_i2t", "0"]["false"] in ("a blue car", "a green car")
    assert bench.kind_of("relative_spatial_t2i") == "spatial" and bench.kind_of("count_i2t") == "counting"
    (count / "text2image.json").write_text(json.dumps([{"query": "a red car", "keys": ["images/red.jpg"], "label": 3}]))
    one_key = bench.run(scorer(), tmp_path, bench.ties).absent[f"{count / 'text2image.json'} [count] record 0"]
    assert one_key == "malformed, skipped: keys is ['images/red.jpg'], not a list of two texts or more"


# ---- ImageCoDe: valid_data.json and the image sets, the description picking its image among ten -----------------------

def test_imagecode_picks_among_a_sets_ten_images_in_frame_order_static_and_video_apart(tmp_path):
    data = tmp_path / "imagecode" / "data"
    order = ["blue"] * 10
    order[3], order[7] = "red", "yellow"  # frame order, not file-name order: img10.jpg sorts after img9.jpg
    video = "MSR-VTT-videoTestVideo_video1-shot1_0"
    for k, c in enumerate(order):
        solid(data / video / f"img{k if k < 9 else 10}.jpg", c)
    static = "open-images-1_abc"
    for k in range(10):
        solid(data / static / f"img{k}.jpg", "green" if k == 2 else "blue")
    solid(data / "open-images-2_short" / "img0.jpg", "red")  # a set of one image: not scored, counted missing
    sets = {video: {"3": " a red car ", "7": "a red car", "9": "a green car"},  # right; wrong (red at 3 beats yellow); ties
            static: {"2": "a green car"}, "open-images-2_short": {"0": "a red car"}}
    (data / "valid_data.json").write_text(json.dumps(sets))
    bright = {"red": (1, 0, 0), "blue": (0, 0, 1), "yellow": (1, 1, 0), "green": (0, 1, 0)}

    def zero_shot(colours, index, text):  # zero_shot.py's loop: the top of (-similarities).argsort() is the target
        t = [text.strip().split().count(w) for w in WORDS]
        sims = np.array([sum(a * b for a, b in zip(bright[c], t, strict=False)) / (math.hypot(*bright[c]) * math.hypot(*t))
                         for c in colours])
        return int((-sims).argsort(kind="stable")[0] == index)

    video_right = [zero_shot(order, int(i), s) for i, s in sets[video].items() if i != "9"]  # no tie among those two
    result = run("imagecode", tmp_path)
    assert video_right == [1, 0]
    assert result.metrics["video"] == {"acc": 1 / 3, "n": 3, "n_missing": 0}  # "a green car": every frame scores 0, a tie: wrong
    assert result.metrics["static"] == {"acc": 1.0, "n": 1, "n_missing": 1}
    assert result.metrics["overall"] == pytest.approx(2 / 4)
    assert result.missing.files == {str(data / "open-images-2_short"): "1 of its 10 images"}
    first = run("imagecode", tmp_path, splits=("video",), ties="clip_benchmark")  # the tie to the first image: index 0, not 9
    assert first.metrics["video"]["acc"] == pytest.approx(1 / 3)
    rows = {r["item"]: r for r in result.items}
    assert rows[f"{video}/3"]["true"] == "a red car" and rows[f"{video}/7"]["image_2"].endswith(f"{video}/img3.jpg")


# ---- EqBen: the released records, Winoground's three scores per subset -----------------------------------------------

def cal_wino_score(result):
    """`evaluate_eqben_locally.py`'s `cal_wino_score`, written again on numpy arrays of c{caption}i{image} scores."""
    text = np.logical_and(result["c0i0"] > result["c1i0"], result["c1i1"] > result["c0i1"])
    image = np.logical_and(result["c0i0"] > result["c0i1"], result["c1i1"] > result["c1i0"])
    return text.mean(), image.mean(), np.logical_and(text, image).mean()


def test_eqben_scores_each_subset_as_the_release_and_counts_a_subset_without_images(tmp_path):
    images = tmp_path / "eqben" / "images"
    for folder in ("eqbensd", "eqbenkubric_attr"):
        for c in ("red", "blue", "yellow"):
            solid(images / folder / f"{c}.png", c)
    records = [  # (subset, image0, caption0, image1, caption1)
        ("eqbensd", "red", "a red thing", "blue", "a blue thing"),  # all right
        ("eqbensd", "red", "a blue thing", "blue", "a red thing"),  # all wrong
        ("eqbensd", "red", ["a red thing", "a blue thing"], "yellow", "a green thing"),  # list: its first; c0: red 1, yellow 1/√2
        ("eqbenkubric_attr", "red", "a red green thing", "blue", "a blue thing"),
        ("eqbenag", "gone", "a red thing", "gone2", "a blue thing")]  # images not there: missing
    ann = [{"image0": f"{s}/{i0}.png", "caption0": c0, "image1": f"{s}/{i1}.png", "caption1": c1} for s, i0, c0, i1, c1 in records]
    (tmp_path / "eqben" / "all_select.json").write_text(json.dumps(ann))
    bright = {"red": (1, 0, 0), "blue": (0, 0, 1), "yellow": (1, 1, 0)}

    def s(image, caption):
        caption = caption[0] if isinstance(caption, list) else caption
        v, t = bright[image], [caption.split().count(w) for w in WORDS]
        return sum(a * b for a, b in zip(v, t, strict=False)) / (math.hypot(*v) * math.hypot(*t)) if any(t) else 0.0

    def release(rows):
        return cal_wino_score({f"c{c}i{i}": np.array([s(r[1 + 2 * i], r[2 + 2 * c]) for r in rows]) for c in (0, 1) for i in (0, 1)})

    result = run("eqben", tmp_path)
    text, image, group = release(records[:3])
    assert result.metrics["eqbensd"] == {"text": text, "image": image, "group": group, "n": 3, "n_missing": 0}
    assert (text, image, group) == (pytest.approx(1 / 3), pytest.approx(2 / 3), pytest.approx(1 / 3))
    ag = result.metrics["eqbenag"]  # its images not there: counted missing, its scores NaN, never 0
    assert (ag["n"], ag["n_missing"]) == (0, 1) and all(math.isnan(ag[k]) for k in ("text", "image", "group"))
    assert result.metrics["overall"]["group"] == pytest.approx((1 + release(records[3:4])[2]) / 4)
    assert f"{tmp_path / 'eqben' / 'all_select.json'} [eqbengebc]" in result.absent and len(result.missing.files) == 2
    assert REGISTRY["eqben"].kind_of("eqbenkubric_attr") == "attribute"
    (tmp_path / "eqben" / "full.json").write_text(json.dumps([{"image0": "eqbensd/red.png", "caption0": "x", "image1": "y"}]))
    lacking = run("eqben", tmp_path, annotation="full.json").absent
    assert lacking[f"{tmp_path / 'eqben' / 'full.json'} [eqbensd] record 0"] == "malformed, skipped: no caption1"


def test_eval_benchmark_all_runs_every_benchmark_whose_files_are_there(tmp_path, capsys):
    """`compclip eval --benchmark all`, as a user runs it: the benchmarks whose files the data root holds (here VALSE and
    SPEC), each with its result file; a root with none is one line, before any model is built."""
    from test_recipes import run_main

    data = tmp_path / "root" / "valse" / "data"
    solid(data / "visual7w" / "images" / "v7w_1.jpg", "red")
    (data / "existence.json").write_text(json.dumps({"e0": valse_record("v7w_1.jpg", "a red car", "a blue car")}))
    spec = tmp_path / "root" / "spec" / "count"
    solid(spec / "a.jpg", "blue")
    solid(spec / "b.jpg", "red")
    (spec / "image2text.json").write_text(json.dumps([{"query": "a.jpg", "keys": ["a red car", "a blue car"], "label": 1}]))
    (spec / "text2image.json").write_text(json.dumps([{"query": "a blue car", "keys": ["a.jpg", "b.jpg"], "label": 0}]))
    code, _, err = run_main(capsys, "-q", "eval", "--model", "compclip-tiny-clip", "--benchmark", "all", "--data-root",
                              tmp_path / "root", "--out", tmp_path / "out", "--workers", "0", "--device", "cpu")
    assert code == 0, err[-2000:]  # results written, marked incomplete (the other instruments and subsets are absent, said)
    assert "valse: " in err and "plurals.json absent: instrument not scored" in err
    assert sorted(p.name for p in (tmp_path / "out").glob("*.json")) == ["spec.json", "valse.json"]
    assert json.loads((tmp_path / "out" / "valse.json").read_text())["metrics"]["existence"]["n"] == 1
    (tmp_path / "empty").mkdir()
    code, _, err = run_main(capsys, "-q", "eval", "--model", "compclip-tiny-clip", "--benchmark", "all", "--data-root",
                            tmp_path / "empty", "--out", tmp_path / "out2")
    assert code != 0 and err.startswith(f"error: --benchmark all: no benchmark's files are under {tmp_path / 'empty'}")
    assert not (tmp_path / "out2").exists()
