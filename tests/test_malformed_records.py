"""Official files with malformed records, as the releases' own files can hold them: each such record is skipped and named
under the result's `absent` by its file, subset and record (never a traceback, never dropped without a word, never a
result that says it is complete), the well-formed records still scored by the benchmark's official rule written out
here, and one benchmark's unusable file does not stop the next benchmark of the same command."""
import json
import math

import numpy as np
import pytest
from PIL import Image

from test_eval_formats import COLOURS, WORDS, cal_wino_score, one2many_rank, run, solid

BRIGHT = {"red": (1, 0, 0), "blue": (0, 0, 1), "yellow": (1, 1, 0), "green": (0, 1, 0)}


def cosine(colour, text):
    """The colour model's score of an image of `colour` and `text`, by hand (0 for a text naming no colour)."""
    v, t = BRIGHT[colour], [text.split().count(w) for w in WORDS]
    return sum(a * b for a, b in zip(v, t, strict=False)) / (math.hypot(*v) * math.hypot(*t)) if any(t) else 0.0


def named(result, place, record):
    return result.absent.get(f"{place} record {record}", "")


# ---- VALSE ------------------------------------------------------------------------------------------------------------

def sample(image, caption, foil, votes=3):
    return {"dataset": "coco", "image_file": image, "linguistic_phenomena": "relations", "caption": caption, "foil": foil,
            "mturk": {"caption": votes, "foil": 3 - votes, "other": 0}}


def test_valse_names_each_malformed_sample_by_instrument_and_keeps_foils_two_of_three_validated(tmp_path):
    data = tmp_path / "valse" / "data"
    for name, colour in (("r.jpg", "red"), ("b.jpg", "blue")):
        solid(data / "relations" / "test_images" / name, colour)
    relations = {
        "ok": sample("r.jpg", "a red car", "a blue car"),  # right
        "two": sample("b.jpg", "a red car", "a blue car", votes=2),  # two of three validated: kept (README), wrong
        "one": sample("r.jpg", "a red car", "a blue car", votes=1),  # one of three: not a valid foil, left out
        "no_mturk": {k: v for k, v in sample("r.jpg", "a red car", "a blue car").items() if k != "mturk"},
        "no_foil": {k: v for k, v in sample("r.jpg", "a red car", "a blue car").items() if k != "foil"},
        "mturk_text": {**sample("r.jpg", "a red car", "a blue car"), "mturk": "3"}}
    (data / "relations.json").write_text(json.dumps(relations))
    (data / "plurals.json").write_text(json.dumps([sample("r.jpg", "a red car", "a blue car")]))  # a list, not the dict
    for file in ("existence.json", "counting-hard.json"):  # two instruments of one image folder, none of its images there
        (data / file).write_text(json.dumps({"e0": sample("gone.jpg", "a red car", "a blue car")}))
    result = run("valse", tmp_path, splits=("relations", "plurals", "existence", "counting_hard"))

    def official(records):  # lxmert_valse_eval.py's loop on the well-formed samples: mturk["caption"] >= 2, caption above foil
        valid = [r for r in records if r["mturk"]["caption"] >= 2]
        colour = {"r.jpg": "red", "b.jpg": "blue"}
        return sum(cosine(colour[r["image_file"]], r["caption"]) > cosine(colour[r["image_file"]], r["foil"]) for r in valid) / len(valid)

    assert result.metrics["relations"] == {"acc": official([relations[k] for k in ("ok", "two", "one")]), "n": 2, "n_missing": 0}
    assert result.metrics["relations"]["acc"] == 0.5 and result.metrics["overall"] == 0.5
    place = f"{data / 'relations.json'} [relations]"
    assert named(result, place, "no_mturk").startswith("malformed, skipped: no mturk")
    assert named(result, place, "no_foil") == "malformed, skipped: no foil"
    assert named(result, place, "mturk_text").startswith("malformed, skipped: mturk is '3', not the annotators' votes")
    assert not named(result, place, "one")  # a foil the annotators rejected is the rule, not a fault
    assert result.absent[str(data / "plurals.json")].startswith("unusable, instrument not scored: ")
    assert "a JSON list, not the official {sample id: sample} object" in result.absent[str(data / "plurals.json")]
    folder = data / "visual7w" / "images"
    assert f"{folder} [existence]" in result.absent and f"{folder} [counting_hard]" in result.absent
    assert not result.complete


def test_foil_it_looks_for_its_images_in_coco_val2014(tmp_path):
    """FOIL-it! is built on COCO val2014 (the repository's config.py points at a val2014 folder): its image is found
    there, and the same file name in another COCO split is not taken for it."""
    name = "COCO_val2014_000000000042.jpg"
    solid(tmp_path / "coco" / "val2014" / name, "red")
    for other in ("train2014", "val2017", "train2017"):
        solid(tmp_path / "coco" / other / name, "blue")
    data = tmp_path / "valse" / "data"
    data.mkdir(parents=True)
    (data / "foil-it.json").write_text(json.dumps({"f0": sample(name, "a red car", "a blue car")}))
    result = run("valse", tmp_path, splits=("foil_it",))
    assert result.metrics["foil_it"] == {"acc": 1.0, "n": 1, "n_missing": 0} and result.complete
    assert result.items[0]["image"].endswith(f"val2014/{name}")


# ---- EqBen ------------------------------------------------------------------------------------------------------------

def test_eqben_names_records_of_no_caption_a_number_or_an_unknown_subset(tmp_path):
    images = tmp_path / "eqben" / "images"
    for folder in ("eqbensd", "eqbenfoo"):
        for c in ("red", "blue"):
            solid(images / folder / f"{c}.png", c)
    good = [("eqbensd", "red", "a red thing", "blue", "a blue thing"), ("eqbensd", "red", "a blue thing", "blue", "a red thing")]
    ann = [{"image0": f"{s}/{i0}.png", "caption0": c0, "image1": f"{s}/{i1}.png", "caption1": c1} for s, i0, c0, i1, c1 in good]
    ann += [{"image0": "eqbensd/red.png", "caption0": [], "image1": "eqbensd/blue.png", "caption1": "a blue thing"},
            {"image0": "eqbensd/red.png", "caption0": "a red thing", "image1": "eqbensd/blue.png", "caption1": 7},
            {"image0": "eqbenfoo/red.png", "caption0": "a red thing", "image1": "eqbenfoo/blue.png", "caption1": "a blue thing"}]
    file = tmp_path / "eqben" / "all_select.json"
    file.write_text(json.dumps(ann))
    result = run("eqben", tmp_path)
    text, image, group = cal_wino_score({f"c{c}i{i}": np.array([cosine(r[1 + 2 * i], r[2 + 2 * c]) for r in good])
                                         for c in (0, 1) for i in (0, 1)})
    assert result.metrics["eqbensd"] == {"text": text, "image": image, "group": group, "n": 2, "n_missing": 0}
    assert result.metrics["overall"] == {"text": text, "image": image, "group": group}
    assert named(result, f"{file} [eqbensd]", 2) == "malformed, skipped: caption0 is an empty list, not a caption or a list of them"
    assert named(result, f"{file} [eqbensd]", 3) == "malformed, skipped: caption1 is 7, not a caption or a list of them"
    assert named(result, str(file), 4).startswith("malformed, skipped: image0's first folder 'eqbenfoo' is none of the subsets")
    assert not result.complete


# ---- SPEC -------------------------------------------------------------------------------------------------------------

def test_spec_names_samples_whose_label_is_a_word_or_a_text_and_whose_keys_are_a_path(tmp_path):
    count = tmp_path / "spec" / "count"
    for c in ("red", "blue"):
        solid(count / f"{c}.jpg", c)
    i2t = [{"query": "red.jpg", "keys": ["a blue car", "a red car"], "label": 1},  # right
           {"query": "blue.jpg", "keys": ["a blue car", "a red car"], "label": 1},  # wrong
           {"query": "red.jpg", "keys": ["a blue car", "a red car"], "label": "first"},
           {"query": "red.jpg", "keys": ["a blue car", "a red car"], "label": "1.0"}]
    t2i = [{"query": "a red car", "keys": ["blue.jpg", "red.jpg"], "label": 1},  # right
           {"query": "a red car", "keys": "red.jpg", "label": 0}]
    (count / "image2text.json").write_text(json.dumps(i2t))
    (count / "text2image.json").write_text(json.dumps(t2i))
    result = run("spec", tmp_path, splits=("count",))

    def release(samples, image_query):  # clip_wrapper's i2t/t2i_evaluate: argmax over the candidates against the label
        right = [int(np.argmax([cosine(s["query"][:-4], k) if image_query else cosine(k[:-4], s["query"]) for k in s["keys"]]))
                 == s["label"] for s in samples]
        return sum(right) / len(right)

    assert result.metrics["count"] == {"i2t": release(i2t[:2], True), "t2i": release(t2i[:1], False), "n_i2t": 2, "n_t2i": 1,
                                       "n_missing": 0}
    assert (result.metrics["i2t"], result.metrics["t2i"]) == (0.5, 1.0)
    i2t_file, t2i_file = f"{count / 'image2text.json'} [count]", f"{count / 'text2image.json'} [count]"
    assert named(result, i2t_file, 2) == "malformed, skipped: label is 'first', not a whole number"
    assert named(result, i2t_file, 3) == "malformed, skipped: label is '1.0', not a whole number"
    assert named(result, t2i_file, 1) == "malformed, skipped: keys is 'red.jpg', not a list of two texts or more"
    assert not result.complete


# ---- SVO-Probes -------------------------------------------------------------------------------------------------------

SVO_HEADER = "sentence,pos_triplet,neg_triplet,subj_neg,verb_neg,obj_neg,pos_image_id,neg_image_id,pos_url,neg_url"


def test_svo_probes_names_rows_not_utf8_or_cut_short_and_reads_a_long_field_as_pandas(tmp_path):
    images = tmp_path / "svo_probes" / "images"
    for image_id, c in (("1", "red"), ("2", "blue")):
        solid(images / f"{image_id}.jpg", c)
    long = "a red car" + " by" * 70_000  # 210,009 characters: over csv's default field limit, read whole as pandas does
    good = [("a red car", "True", "False", "False", 1, 2), ("a blue car", "True", "False", "False", 1, 2),
            (long, "False", "False", "True", 1, 2)]
    lines = [SVO_HEADER.encode()] + [f"{s},x,y,{a},{b},{c},{p},{n},u,v".encode() for s, a, b, c, p, n in good]
    lines.insert(2, "a caf\u00e9 car,x,y,True,False,False,1,2,u,v".encode("latin-1"))  # line 3: a Latin-1 byte
    lines.append(b"a red car,x,y,False,True,False,1,,u,v")  # line 6: no false image
    lines.append(b"a red car,x,y,False,True,False,1")  # line 7: cut mid-line
    file = tmp_path / "svo_probes" / "svo_probes.csv"
    file.write_bytes(b"\n".join(lines))
    result = run("svo_probes", tmp_path, rule="pairwise")

    def notebook(rows):  # each row the sentence choosing between its images: s(true image) > s(false image)
        colour = {1: "red", 2: "blue"}
        return sum(cosine(colour[p], s) > cosine(colour[n], s) for s, *_, p, n in rows) / len(rows)

    assert result.metrics["subj"] == {"acc": notebook(good[:2]), "n": 2, "n_missing": 0}
    assert result.metrics["obj"] == {"acc": notebook(good[2:]), "n": 1, "n_missing": 0} and result.metrics["obj"]["acc"] == 1.0
    assert result.metrics["overall"] == notebook(good) == pytest.approx(2 / 3)
    assert named(result, f"{file} [subj]", "at line 3") == ("malformed, skipped: sentence holds bytes that are not UTF-8 (the file "
                                                            "is read as UTF-8, as the release writes it)")
    assert named(result, f"{file} [verb]", "at line 6") == "malformed, skipped: neg_image_id is empty"
    assert named(result, f"{file} [verb]", "at line 7").startswith("malformed, skipped: 7 fields, the header has 10")
    assert not any(k.endswith(("images/.jpg", "images/None.jpg")) for k in result.missing.files)
    assert not result.complete


# ---- CREPE ------------------------------------------------------------------------------------------------------------

CREPE_HEADER = "region_id,image_id,x,y,width,height,caption,hard_negs"


def test_crepe_reads_one_quoted_hard_negative_as_one_option_and_names_rows_it_cannot_score(tmp_path):
    half = Image.new("RGB", (32, 16), COLOURS["red"])
    half.paste(Image.new("RGB", (16, 16), COLOURS["blue"]), (16, 0))  # left red, right blue
    (tmp_path / "visual_genome" / "VG_100K").mkdir(parents=True)
    half.save(tmp_path / "visual_genome" / "VG_100K" / "7.jpg")
    long = "a red car" + " by" * 50_000  # a hard negative over csv's default field limit: read whole, as pandas does
    rows = [b'0,7,16,0,16,16,a blue car,"[\'a red car\', \'a green car\']"',  # line 2: right
            b'1,7,0,0,16,16,a blue car,"\'a red car\'"',  # line 3: one quoted text, one option: the red region ranks it above
            b'2,7,16,0,0,16,a blue car,"[\'a red car\']"',  # line 4: a region of width 0
            b'3,7,16,0,16,16,a blue car,[]',  # line 5: no hard negative
            "4,7,16,0,16,16,a blue caf\u00e9,\"['a red car']\"".encode("latin-1"),  # line 6: a Latin-1 byte
            f"5,7,16,0,16,16,a blue car,\"['{long}']\"".encode()]  # line 7: right
    file = tmp_path / "crepe" / "prod_hard_negatives" / "swap" / "prod_vg_hard_negs_swap_complexity_4.csv"
    file.parent.mkdir(parents=True)
    file.write_bytes(b"\n".join([CREPE_HEADER.encode(), *rows]) + b"\n")
    broken = file.with_name("prod_vg_hard_negs_swap_complexity_5.csv")  # a quote that never closes: the file is unusable
    broken.write_text(f"{CREPE_HEADER}\n0,7,16,0,16,16,a blue car,\"['a red car']\n")
    result = run("crepe", tmp_path, splits=("prod_swap_4", "prod_swap_5"))
    region = {(16, 0): (0, 0, 1), (0, 0): (1, 0, 0)}

    def score(x, text):
        t = [text.split().count(w) for w in WORDS]
        return sum(a * b for a, b in zip(region[x, 0], t, strict=True)) / math.hypot(*t)

    scored = [(16, "a blue car", ["a red car", "a green car"]), (0, "a blue car", ["a red car"]), (16, "a blue car", [long])]
    ranks = [one2many_rank([score(x, o) for o in [caption, *hard]]) for x, caption, hard in scored]
    assert ranks == [0, 1, 0]
    assert result.metrics["prod_swap_4"] == {"acc": 2 / 3, "recall@1": 2 / 3, "recall@3": 1.0, "recall@5": 1.0, "recall@10": 1.0,
                                             "n": 3, "n_missing": 0}
    assert [r["texts"] for r in result.items][1] == ["a blue car", "a red car"]  # not 9 one-letter options
    place = f"{file} [prod_swap_4]"
    assert named(result, place, "at line 4") == "malformed, skipped: the region's width 0 and height 16 are not both above 0"
    assert named(result, place, "at line 5") == "malformed, skipped: hard_negs is empty: no hard negative to rank the caption among"
    assert named(result, place, "at line 6").startswith("malformed, skipped: caption holds bytes that are not UTF-8")
    assert "a quote (\") that never closes" in result.absent[str(broken)] and "prod_swap_5" not in result.metrics
    assert result.metrics["prod_swap"] == 2 / 3 and not result.complete


# ---- ImageCoDe --------------------------------------------------------------------------------------------------------

def test_imagecode_names_a_null_description_and_indices_out_of_the_set(tmp_path):
    data = tmp_path / "imagecode" / "data"
    video = "MSR-VTT-videoTestVideo_video1-shot1_0"
    order = ["blue"] * 10
    order[3] = "red"
    for k, c in enumerate(order):
        solid(data / video / f"img{k}.jpg", c)
    sets = {video: {"3": "a red car", "5": "a red car", "4": None, "10": "a red car", "first": "a red car"}}
    (data / "valid_data.json").write_text(json.dumps(sets))
    result = run("imagecode", tmp_path)

    def zero_shot(index, text):  # zero_shot.py: the top of (-similarities).argsort() is the description's image
        return int(int(np.argmax([cosine(c, text) for c in order])) == index)

    assert result.metrics["video"] == {"acc": (zero_shot(3, "a red car") + zero_shot(5, "a red car")) / 2, "n": 2, "n_missing": 0}
    assert result.metrics["video"]["acc"] == 0.5 and result.metrics["overall"] == 0.5
    place = f"{data / 'valid_data.json'} [video]"
    assert named(result, place, f"{video}/4") == "malformed, skipped: the description is None, not a text"
    assert named(result, place, f"{video}/10") == "malformed, skipped: image index '10' is not one of 0 to 9"
    assert named(result, place, f"{video}/first") == "malformed, skipped: image index 'first' is not one of 0 to 9"
    assert not result.complete


# ---- one command, several benchmarks ----------------------------------------------------------------------------------

def test_an_unusable_file_of_one_benchmark_does_not_stop_the_next_in_the_same_command(tmp_path, capsys):
    """`compclip eval --benchmark imagecode,spec`, imagecode's file not the release's {set: {index: description}}: spec
    is still scored and written, imagecode's result says why it scored nothing, and the command exits 1."""
    from test_recipes import run_main

    root = tmp_path / "root"
    (root / "imagecode" / "data").mkdir(parents=True)
    (root / "imagecode" / "data" / "valid_data.json").write_text(json.dumps([{"3": "a red car"}]))
    spec = root / "spec" / "count"
    solid(spec / "a.jpg", "blue")
    solid(spec / "b.jpg", "red")
    (spec / "image2text.json").write_text(json.dumps([{"query": "a.jpg", "keys": ["a red car", "a blue car"], "label": 1}]))
    (spec / "text2image.json").write_text(json.dumps([{"query": "a blue car", "keys": ["a.jpg", "b.jpg"], "label": 0}]))
    code, out, err = run_main(capsys, "-q", "eval", "--model", "compclip-tiny-clip", "--benchmark", "imagecode,spec", "--data-root",
                              root, "--out", tmp_path / "out", "--workers", "0", "--device", "cpu")
    assert code == 1, err[-2000:]
    said = [line for line in out.splitlines() if line.startswith("imagecode: ")]
    assert len(said) == 1 and "valid_data.json: not {image set: {image index: description}}" in said[0]
    written = json.loads((tmp_path / "out" / "spec.json").read_text())
    assert written["metrics"]["count"]["n_i2t"] == 1 and written["metrics"]["count"]["n_t2i"] == 1
    bad = json.loads((tmp_path / "out" / "imagecode.json").read_text())
    assert bad["metrics"] == {} and not bad["complete"] and "valid_data.json: not {image set" in bad["lacks"]
    assert "Traceback" not in err


def test_sugarcrepe_and_its_plus_plus_files_swapped_are_each_named_in_one_line(tmp_path, capsys):
    """`compclip eval --benchmark sugarcrepe,sugarcrepe_pp` with each one's swap_att.json in the other's folder (sugar-crepe
    writes an object keyed by record id, scpp a list of records): each benchmark says in one line which file is not of
    its release's shape, and the command exits 1 without a traceback."""
    from test_recipes import run_main

    root = tmp_path / "root"
    solid(root / "coco" / "val2017" / "a.jpg", "red")
    record = {"filename": "a.jpg", "caption": "a red car", "caption2": "a car that is red", "negative_caption": "a blue car"}
    (root / "sugarcrepe").mkdir()
    (root / "sugarcrepe_pp").mkdir()
    (root / "sugarcrepe" / "swap_att.json").write_text(json.dumps([record]))
    (root / "sugarcrepe_pp" / "swap_att.json").write_text(json.dumps({"0": record}))
    code, out, err = run_main(capsys, "-q", "eval", "--model", "compclip-tiny-clip", "--benchmark",
                              "sugarcrepe/swap_att,sugarcrepe_pp/swap_att", "--data-root", root, "--out", tmp_path / "out",
                              "--workers", "0", "--device", "cpu")
    assert code == 1 and "Traceback" not in err, err[-2000:]
    said = {line.split(": ", 1)[0]: line for line in out.splitlines() if line.startswith("sugarcrepe")}
    sugarcrepe_said = said["sugarcrepe/swap_att"]
    assert f"{root / 'sugarcrepe' / 'swap_att.json'}: a JSON list, not sugar-crepe's {{record id: record}} object" in sugarcrepe_said
    assert f"{root / 'sugarcrepe_pp' / 'swap_att.json'}: a JSON dict, not scpp's list of records" in said["sugarcrepe_pp/swap_att"]


def test_sugarcrepe_and_plus_plus_records_without_a_text_are_skipped_and_named(tmp_path, capsys):
    """A SugarCrepe record without its negative caption or with a number for its caption, and a SugarCrepe++ record
    without its paraphrase, raised a KeyError (a traceback). Each is now skipped and named by file and record, the others
    scored as alone, and the result is not complete."""
    from test_recipes import run_main

    root = tmp_path / "root"
    solid(root / "coco" / "val2017" / "a.jpg", "red")
    good = {"filename": "a.jpg", "caption": "a red car", "caption2": "a car that is red", "negative_caption": "a blue car"}
    no_negative = {k: v for k, v in good.items() if k != "negative_caption"}
    (root / "sugarcrepe").mkdir()
    (root / "sugarcrepe_pp").mkdir()
    (root / "sugarcrepe" / "swap_att.json").write_text(json.dumps({"0": good, "1": no_negative, "2": {**good, "caption": 7}}))
    (root / "sugarcrepe_pp" / "swap_att.json").write_text(json.dumps([good, {k: v for k, v in good.items() if k != "caption2"}]))
    code, _, err = run_main(capsys, "-q", "eval", "--model", "compclip-tiny-clip", "--benchmark",
                            "sugarcrepe/swap_att,sugarcrepe_pp/swap_att", "--data-root", root, "--out", tmp_path / "out",
                            "--workers", "0", "--device", "cpu")
    assert code == 0 and "Traceback" not in err, err[-2000:]  # each scored the rest: a warning, not a failure
    assert err.count("malformed, skipped") == 3
    sc = json.loads((tmp_path / "out" / "sugarcrepe-swap_att.json").read_text())
    pp = json.loads((tmp_path / "out" / "sugarcrepe_pp-swap_att.json").read_text())
    file = root / "sugarcrepe" / "swap_att.json"
    assert sc["absent"] == {f"{file} record 1": "malformed, skipped: no negative_caption",
                            f"{file} record 2": "malformed, skipped: caption is 7, not a text"}
    assert pp["absent"] == {f"{root / 'sugarcrepe_pp' / 'swap_att.json'} record 1": "malformed, skipped: no caption2"}
    assert not sc["complete"] and not pp["complete"]
    assert sc["metrics"]["swap_att"]["n"] == 1 and pp["metrics"]["swap_att"]["n"] == 1 == pp["metrics"]["swap_att"]["n_itt"]
