"""BLA, COLA, ColorFoil and ColorSwap on small data built in each release's layout and record shape, scored by the colour
stand-in model (scores counted by hand) against each benchmark's official rule written out here, with malformed
records named and skipped; and one of them through `compclip eval` with the bundled tiny model."""
import json
import math
import random

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from compclip.eval import REGISTRY
from compclip.eval.items import COLUMNS, write_items
from test_eval_formats import WORDS, scorer, solid, write_parquet

BRIGHT = {"red": (1, 0, 0), "green": (0, 1, 0), "blue": (0, 0, 1), "yellow": (1, 1, 0)}


def cosine(colour, text):
    """The stand-in model's score of an image of `colour` and `text`, by hand: 0 for a text naming none of its words."""
    v, t = BRIGHT[colour], [text.lower().split().count(w) for w in WORDS]
    return sum(a * b for a, b in zip(v, t, strict=True)) / (math.hypot(*v) * math.hypot(*t)) if any(t) else 0.0


def evaluate(name, root, ties, **options):
    """The benchmark's result as the library call gives it, its per-item rows written and read back as `compclip eval`
    writes them."""
    import pandas as pd

    bench = REGISTRY[name]
    result = bench.run(scorer(), root, ties, (), bench.Options(**options))
    write_items(root / f"{name}.items.parquet", result.items)
    rows = pd.read_parquet(root / f"{name}.items.parquet")
    assert tuple(rows.columns[: len(COLUMNS)]) == COLUMNS and len(rows) == len(result.items)
    return result


def named(result, place, record):
    return result.absent.get(f"{place} record {record}", "")


# ---- COLA: the release's JSON of [link, caption, link, caption], images saved under the links' file names -----------

def cola_multi_obj_acc(preds):
    """COLA's scripts/eval.py `ColaMultiObjAcc`, preds[image, caption]: each caption prefers its own image."""
    return preds[0][0] > preds[1][0] and preds[1][1] > preds[0][1]


COLA = [  # (image 1 colour, caption 1, image 2 colour, caption 2)
    ("red", "a red thing", "blue", "a blue thing"),  # all right
    ("red", "a blue thing", "blue", "a red thing"),  # all wrong
    ("red", "a red green thing", "green", "a green thing"),  # caption 1 scores both images 1/√2: image score a tie
]


@pytest.mark.parametrize("ties", ["strict", "clip_benchmark"])
def test_cola_scores_colas_multi_object_rule_and_names_malformed_records(tmp_path, ties):
    folder = tmp_path / "cola"
    records = []
    for k, (c0, t0, c1, t1) in enumerate(COLA):
        records.append([f"https://cs-people.bu.edu/array/data/vg_gqa_images/{k}0.jpg", t0,
                        f"https://cs-people.bu.edu/array/data/vg_gqa_images/{k}1.jpg", t1])
        solid(folder / f"{k}0.jpg", c0)
        solid(folder / f"{k}1.jpg", c1)
    records += [["https://x/a.jpg", "a red thing", "https://x/b.jpg"],  # three fields
                ["https://x/a.jpg", 7, "https://x/b.jpg", "a red thing"],  # a caption that is not a text
                ["https://x/", "a red thing", "https://x/b.jpg", "a blue thing"],  # a link to no file
                ["https://x/gone.jpg", "a red thing", "https://x/10.jpg", "a blue thing"]]  # its first image not saved
    (folder / "COLA_multiobjects_matching_benchmark.json").write_text(json.dumps(records))
    result = evaluate("cola", tmp_path, ties)
    preds = [[[cosine(ci, t) for t in (t0, t1)] for ci in (c0, c1)] for c0, t0, c1, t1 in COLA]
    image = [cola_multi_obj_acc(p) for p in preds]
    text = [p[0][0] > p[0][1] and p[1][1] > p[1][0] for p in preds]  # each image prefers its own caption
    if ties == "clip_benchmark":  # the tie of the third: the first-listed image wins it
        image[2] = True
    group = [i and t for i, t in zip(image, text, strict=True)]
    assert result.metrics == {"image_acc": sum(image) / 3, "text_acc": sum(text) / 3, "acc": sum(group) / 3, "n": 3}
    assert result.metrics["image_acc"] == (2 / 3 if ties == "clip_benchmark" else 1 / 3)
    file = folder / "COLA_multiobjects_matching_benchmark.json"
    assert named(result, file, 3).startswith("malformed, skipped: ") and "not a list of 4 fields" in named(result, file, 3)
    assert named(result, file, 4) == "malformed, skipped: caption 1 is 7, not a text"
    assert named(result, file, 5) == "malformed, skipped: image 1 link is 'https://x/', not a link to an image file"
    assert result.missing.as_record()["count"] == 1 and not result.complete
    assert [(r["item"], r["correct"], r["image_correct"]) for r in result.items] == [
        (str(k), image[k] and text[k], image[k]) for k in range(3)]


# ---- ColorSwap: the Hub's Parquet and the release's test.json ---------------------------------------------------------

COLORSWAP = [  # (image 1 colour, image 2 colour, caption 1, caption 2)
    ("red", "blue", "a red thing", "a blue thing"),  # all right
    ("red", "blue", "a blue thing", "a red thing"),  # all wrong
    ("red", "green", "a red green thing", "a green thing"),  # image score a tie: caption 1 scores both 1/√2
    ("red", "yellow", "a red thing", "a green thing"),  # text score a tie: image 2 scores both captions 1/√2
]


def winoground_scores(c0, c1, t0, t1):
    """Winoground's paper, s(caption, image): text when each image prefers its caption, image when each caption prefers
    its image, group both."""
    s = {(c, i): cosine(colour, caption) for c, caption in enumerate((t0, t1)) for i, colour in enumerate((c0, c1))}
    text = s[0, 0] > s[1, 0] and s[1, 1] > s[0, 1]
    image = s[0, 0] > s[0, 1] and s[1, 1] > s[1, 0]
    return text, image, text and image


def test_colorswap_reads_the_hub_parquet_and_the_release_json_and_scores_winogrounds_rule(tmp_path):
    hub, release = tmp_path / "hub", tmp_path / "release"
    rows = [{"id": k, "image_1": c0, "image_2": c1, "caption_1": t0, "caption_2": t1} for k, (c0, c1, t0, t1) in enumerate(COLORSWAP)]
    rows.append({"id": 4, "image_1": "red", "image_2": "blue", "caption_1": "  ", "caption_2": "a blue thing"})  # an empty caption
    write_parquet(hub / "colorswap" / "data" / "test-00000-of-00001.parquet", rows, images=("image_1", "image_2"))
    records = []
    for k, (c0, c1, t0, t1) in enumerate(COLORSWAP):
        solid(release / "colorswap" / "images" / f"img_{k}_1.png", c0)
        solid(release / "colorswap" / "images" / f"img_{k}_2.png", c1)
        records.append({"id": k, "caption_1": t0, "caption_2": t1, "image_1": f"images/img_{k}_1.png", "image_2": f"images/img_{k}_2.png",
                        "image_source": "midjourney", "caption_source": "human"})
    records.append({"id": 4, "caption_1": "a red thing", "caption_2": "a blue thing", "image_1": "images/img_0_1.png"})  # no image_2
    (release / "colorswap" / "test.json").write_text(json.dumps(records))
    verdicts = [winoground_scores(*ex) for ex in COLORSWAP]
    expected = {"text_acc": sum(v[0] for v in verdicts) / 4, "image_acc": sum(v[1] for v in verdicts) / 4,
                "acc": sum(v[2] for v in verdicts) / 4, "n": 4}
    assert expected == {"text_acc": 0.5, "image_acc": 0.5, "acc": 0.25, "n": 4}
    for root, place, why in ((hub, hub / "colorswap" / "data" / "test-*.parquet", "caption_1 is empty"),
                             (release, release / "colorswap" / "test.json", "no image_2")):
        result = evaluate("colorswap", root, "strict")
        assert result.metrics == expected
        assert result.absent == {f"{place} record 4": f"malformed, skipped: {why}"} and not result.complete
        assert [r["correct"] for r in result.items] == [v[2] for v in verdicts]
    tied = evaluate("colorswap", release, "clip_benchmark")  # each tie to the first-listed: image 1, caption 1
    assert (tied.metrics["text_acc"], tied.metrics["image_acc"]) == (0.5, 0.75)


# ---- BLA: the release's zip unzipped into bla/ -----------------------------------------------------------------------

FOUR = ("True1", "True2", "False1", "False2")
BLA = [  # image colour, [True1, True2, False1, False2]
    ("red", ["a red car", "the red one", "a blue car", "a green car"]),  # both true above both false
    ("red", ["a red car", "a car", "a blue car", "a green car"]),  # True2 ties both false ones at 0
    ("blue", ["a red car", "a green car", "a blue car", "a blue blue car"]),  # both false above both true
    ("red", ["a car", "a red car", "a blue car", "a green car"]),  # True1 ties both false ones at 0
]


def get_accuracy(rank):
    """BLA's evaluation_models/clip/utils.py `get_accuracy`, rank[i] the 1-based rank of caption i (trues listed first)."""
    correct_count, total = 0, len(rank)
    for i, r in enumerate(rank):
        if (i < total / 2 and r <= total / 2) or (i >= total / 2 and r > total / 2):
            correct_count += 1
    return correct_count / total


def ranks(scores, false_first):
    """Each caption's 1-based rank: those scoring higher rank above it, and among equal scores a false caption (false_first)
    or the one listed earlier."""
    def before(d, c):
        if scores[d] != scores[c]:
            return scores[d] > scores[c]
        return (d >= 2) > (c >= 2) or ((d >= 2) == (c >= 2) and d < c) if false_first else d < c
    return [1 + sum(before(d, c) for d in range(4) if d != c) for c in range(4)]


@pytest.mark.parametrize("ties", ["strict", "clip_benchmark"])
def test_bla_scores_clip_benchmarks_rule_and_blas_own_and_names_what_it_skips(tmp_path, ties):
    base = tmp_path / "bla" / "BLA_benchmark"
    records = []
    for k, (colour, captions) in enumerate(BLA):
        solid(base / "images" / f"{100 + k}.jpg", colour)
        records.append({"image_id": str(100 + k), "caption_group": [dict(zip(FOUR, captions, strict=True))]})
    records += [{"image_id": "100", "caption_group": [{"True1": "a red car", "True2": "a red one", "False1": "a blue car"}]},
                {"image_id": None, "caption_group": [dict(zip(FOUR, BLA[0][1], strict=True))]},
                {"image_id": "gone", "caption_group": [dict(zip(FOUR, BLA[0][1], strict=True))]}]
    (base / "annotations").mkdir(parents=True)
    (base / "annotations" / "active_passive_captions.json").write_text(json.dumps(records))
    result = evaluate("bla", tmp_path, ties)
    scores = [[cosine(colour, c) for c in captions] for colour, captions in BLA]
    # CLIP_benchmark's image_caption_selection: the lowest true score above the highest false one (ties: see below)
    right = [min(s[:2]) > max(s[2:]) for s in scores]
    if ties == "clip_benchmark":  # the true caption tied with the false ones (of the second, of the fourth): listed first, it wins
        right[1] = right[3] = True
    own = sum(get_accuracy(ranks(s, false_first=ties == "strict")) for s in scores) / 4
    task = result.metrics["active_passive_captions"]
    assert task == {"acc": sum(right) / 4, "text_acc": sum(right) / 4, "caption_acc": own, "n": 4, "n_missing": 1}
    assert task["caption_acc"] == (0.5 if ties == "strict" else 0.75)  # items: 1, ½ or 1, 0, ½ or 1
    file = base / "annotations" / "active_passive_captions.json"
    assert named(result, file, 4) == "malformed, skipped: no False2"
    assert named(result, file, 5) == "malformed, skipped: image_id is None, not an image's id"
    assert result.absent[str(base / "annotations" / "coordination_captions.json")] == "absent: task not scored"
    assert result.missing.as_record()["count"] == 1 and "image_acc" not in task
    assert [r["correct"] for r in result.items] == right


# ---- ColorFoil: built from COCO's captions file ------------------------------------------------------------------------

def notebook_colorfoil(coco, seed):
    """The release's zero_shot_evaluation.ipynb `prapare_data` and `create_foil`, the module's generator seeded first."""
    import matplotlib.colors

    css3 = set(matplotlib.colors.CSS4_COLORS) - {"rebeccapurple"}  # CSS4's keywords are CSS3's and one more
    random.seed(seed)

    def create_foil(caption):
        colors = ["blue", "black", "red", "pink", "yellow", "grey", "orange", "white", "green", "brown"]
        for color in caption.split(" "):
            if color in css3:
                num = random.randint(0, 9)
                foiling_color = colors[num - 1] if colors[num] == color else colors[num]
                caption = caption.replace(color, foiling_color)
        return caption

    rows = []
    for i in coco["images"]:
        flag = False
        for j in coco["annotations"]:
            if j["image_id"] == i["id"]:
                for word in j["caption"].split(" "):
                    if word in css3:
                        flag = True
                if flag:
                    rows.append((i["coco_url"].rsplit("/", 1)[1], j["caption"], create_foil(j["caption"])))
                    break
    return rows


def coco_url(k):
    return f"http://images.cocodataset.org/val2017/{k:012d}.jpg"


@pytest.mark.parametrize("seed", [0, 3])
def test_colorfoil_builds_the_notebooks_foils_and_scores_caption_above_foil(tmp_path, seed):
    colours = {1: "red", 2: "blue", 3: "green", 4: "red", 5: "yellow"}
    images = [{"id": k, "file_name": f"{k:012d}.jpg", "coco_url": coco_url(k)} for k in colours]
    annotations = [
        {"image_id": 1, "id": 10, "caption": "a car on a road"},  # no colour: the next caption is taken
        {"image_id": 1, "id": 11, "caption": "a red car next to a red bus"},  # two colour words, the same: two draws
        {"image_id": 2, "id": 12, "caption": "a blue bus and a green tree"},
        {"image_id": 2, "id": 13, "caption": "a red bus"},  # a later caption of an image already taken: not an item
        {"image_id": 3, "id": 14, "caption": "A Green field."},  # no colour word as written, split on spaces
        {"image_id": 4, "id": 15, "caption": "a tired dog on a red mat"},  # the plain replace reaches into "tired" too
        {"image_id": 5, "id": 16, "caption": None},  # not a text
        {"image_id": 5, "id": 17, "caption": "a yellow kite over the red sand"}]
    for k, colour in colours.items():
        solid(tmp_path / "coco" / "val2017" / f"{k:012d}.jpg", colour)
    coco = {"images": [*images, {"id": 6, "file_name": "x.jpg"}], "annotations": annotations}  # image 6 has no coco_url
    (tmp_path / "coco" / "captions_val2017.json").write_text(json.dumps(coco))
    result = evaluate("colorfoil", tmp_path, "strict", seed=seed)
    well_formed = {"images": images, "annotations": [a for a in annotations if isinstance(a["caption"], str)]}
    official = notebook_colorfoil(well_formed, seed)
    assert [(r["image"].rsplit("/", 1)[1], *r["texts"]) for r in result.items] == official
    assert [r[1] for r in official] == [annotations[k]["caption"] for k in (1, 2, 5, 7)]
    by_file = {f"{k:012d}.jpg": c for k, c in colours.items()}
    right = [cosine(by_file[f], caption) > cosine(by_file[f], foil) for f, caption, foil in official]
    assert result.metrics == {"acc": sum(right) / 4, "text_acc": sum(right) / 4, "n": 4, "seed": seed}
    file = tmp_path / "coco" / "captions_val2017.json"
    assert named(result, f"{file} annotations", 6) == "malformed, skipped: caption is None, not a text"
    assert named(result, f"{file} images", 5) == "malformed, skipped: no coco_url"


def test_colorfoil_colour_words_are_css3s():
    """The colour words ColorFoil looks for: webcolors' CSS3 names, which are CSS4's keywords but rebeccapurple."""
    import matplotlib.colors

    from compclip.eval.benchmarks.colorfoil import CSS3_NAMES

    assert set(matplotlib.colors.CSS4_COLORS) - {"rebeccapurple"} == CSS3_NAMES and len(CSS3_NAMES) == 147


# ---- through `compclip eval`, with the bundled tiny model ---------------------------------------------------------------

def test_cli_eval_writes_colas_scores_as_the_tiny_model_gives_them(tmp_path, capsys):
    """`compclip eval --benchmark cola` with compclip-tiny-clip: the result JSON's figures are COLA's rule on the model's
    own cosines, computed here one pair at a time."""
    from compclip.models import load_model
    from conftest import image_bytes, run_main

    folder = tmp_path / "data" / "cola"
    folder.mkdir(parents=True)
    captions = [("a white plate on a wooden table", "a wooden plate on a white table"), ("a large red ball", "a small blue box"),
                ("a dog behind a cat", "a cat behind a dog"), ("green leaves on a tree", "a tree on green leaves")]
    records = []
    for k, (t0, t1) in enumerate(captions):
        for i in (0, 1):
            (folder / f"{k}{i}.jpg").write_bytes(image_bytes(10 * k + i))
        records.append([f"https://cs-people.bu.edu/array/data/vg_gqa_images/{k}0.jpg", t0,
                        f"https://cs-people.bu.edu/array/data/vg_gqa_images/{k}1.jpg", t1])
    (folder / "COLA_multiobjects_matching_benchmark.json").write_text(json.dumps(records))
    out = tmp_path / "results"
    code, _, err = run_main(capsys, "eval", "--model", "compclip-tiny-clip", "--benchmark", "cola", "--data-root", tmp_path / "data",
                            "--out", out, "--workers", 0, "--device", "cpu")
    assert code in (0, None), err
    metrics = json.loads((out / "cola.json").read_text())["metrics"]
    model, preprocess, tokenizer = load_model("compclip-tiny-clip")
    verdicts = []
    with torch.no_grad():
        for k, (t0, t1) in enumerate(captions):
            shown = torch.stack([preprocess(Image.open(folder / f"{k}{i}.jpg").convert("RGB")) for i in (0, 1)])
            texts = F.normalize(model.encode_text(tokenizer([t0, t1])), dim=-1)
            preds = (F.normalize(model.encode_image(shown), dim=-1) @ texts.T).tolist()
            verdicts.append((cola_multi_obj_acc(preds), preds[0][0] > preds[0][1] and preds[1][1] > preds[1][0]))
    assert metrics["n"] == 4 and metrics["image_acc"] == sum(v[0] for v in verdicts) / 4
    assert metrics["text_acc"] == sum(v[1] for v in verdicts) / 4 and metrics["acc"] == sum(all(v) for v in verdicts) / 4
