"""The official scoring rules of SVO-Probes, CREPE and ImageCoDe, each written out again here from the release's code, and
compclip's own choices as named options that the run records as departures and `report --paper` marks."""
from __future__ import annotations

import json
import logging
import math

import numpy as np
import pandas as pd
import pytest

from compclip import evaluate as evaluate_model
from compclip.eval import REGISTRY
from compclip.eval.report import protocol_differences
from test_eval_formats import WORDS, ColourModel, crepe_csv, preprocess, solid, tokenizer

BRIGHT = {"red": (1, 0, 0), "blue": (0, 0, 1), "green": (0, 1, 0), "yellow": (1, 1, 0)}  # the colour model's image embeddings


def cosine(colour: str, text: str) -> float:
    """The colour model's score, counted by hand: the cosine of the image's bright channels and the text's colour words."""
    counts = [text.split().count(w) for w in WORDS]
    return sum(a * b for a, b in zip(BRIGHT[colour], counts, strict=False)) / (math.hypot(*BRIGHT[colour]) * math.hypot(*counts))


def evaluate(benchmark, root, **options):
    return evaluate_model(ColourModel(), preprocess, tokenizer, benchmark, data_root=root, name="colour", **options)


# ---- SVO-Probes: the notebook's match decisions, each pair once, Avg = (Pos + Neg) / 2 --------------------------------

SVO_IMAGES = {"1": "red", "2": "blue", "3": "red", "4": "green", "5": "yellow"}
SVO_ROWS = [  # sentence, subj_neg, verb_neg, obj_neg, pos_image_id, neg_image_id
    ("a red car", "True", "False", "False", 1, 2),
    ("a red car", "True", "False", "False", 1, 2),  # the same row again, and again: each pair counts once
    ("a red car", "True", "False", "False", 1, 2),
    ("a blue car", "True", "False", "False", 1, 2),  # both pairs decided wrong
    ("a red car", "False", "True", "False", 3, 2),  # its negative pair is also subj's: once in All
    ("a red green car", "False", "True", "False", 1, 4),  # 1/√2 on both: each a match, the negative one wrongly
    ("a green car", "False", "False", "True", 4, 1),
    ("a green car", "False", "False", "True", 4, 3),  # the positive pair repeated in another row
    ("a green car", "False", "False", "True", 4, 5),  # yellow: 1/√2, a match; obj has one positive pair and three negative
]


def notebook_accuracy(frame):
    """The notebook's `accuracy`, as it is written in `probing_image_text_models.ipynb`."""
    neg = frame[["sentence", "neg_image_id", "neg_scores"]].drop_duplicates()
    pos = frame[["sentence", "pos_image_id", "pos_scores"]].drop_duplicates()
    neg_acc = np.mean([item == 0 for item in neg["neg_scores"].values])
    pos_acc = np.mean([item == 1 for item in pos["pos_scores"].values])
    return (neg_acc + pos_acc) / 2, pos_acc, neg_acc


def write_svo(root):
    for image_id, colour in SVO_IMAGES.items():
        solid(root / "svo_probes" / "images" / f"{image_id}.jpg", colour)
    header = "sentence,pos_triplet,neg_triplet,subj_neg,verb_neg,obj_neg,pos_image_id,neg_image_id,pos_url,neg_url"
    lines = [header] + [f"{s},x,y,{a},{b},{c},{p},{n},u,v" for s, a, b, c, p, n in SVO_ROWS]
    (root / "svo_probes" / "svo_probes.csv").write_text("\n".join(lines) + "\n")


def test_svo_probes_scores_by_the_notebooks_rule_each_repeated_pair_once(tmp_path):
    write_svo(tmp_path)
    threshold = 0.5
    frame = pd.DataFrame(SVO_ROWS, columns=["sentence", "subj_neg", "verb_neg", "obj_neg", "pos_image_id", "neg_image_id"])
    for column in ("subj_neg", "verb_neg", "obj_neg"):
        frame[column] = frame[column] == "True"
    for side in ("pos", "neg"):  # the model's 0/1 decision of each pair, as the notebook's JSON gives it
        pairs = zip(frame.sentence, frame[f"{side}_image_id"], strict=True)
        frame[f"{side}_scores"] = [int(cosine(SVO_IMAGES[str(i)], s) > threshold) for s, i in pairs]
    subsets = {"subj": frame[frame.subj_neg & ~frame.obj_neg & ~frame.verb_neg],
               "verb": frame[frame.verb_neg & ~frame.obj_neg & ~frame.subj_neg],
               "obj": frame[frame.obj_neg & ~frame.verb_neg & ~frame.subj_neg]}

    record = evaluate("svo_probes", tmp_path, bench_options={"svo_probes": {"threshold": threshold}})["svo_probes"]
    for name, subset in subsets.items():
        avg, pos, neg = notebook_accuracy(subset)
        assert record["metrics"][name]["acc"] == pytest.approx(avg) and record["metrics"][name]["pos_acc"] == pytest.approx(pos)
        assert record["metrics"][name]["neg_acc"] == pytest.approx(neg)
    avg, pos, neg = notebook_accuracy(pd.concat(list(subsets.values())))
    overall = (record["metrics"]["overall"], record["metrics"]["overall_pos"], record["metrics"]["overall_neg"])
    assert overall == pytest.approx((avg, pos, neg))
    assert record["metrics"]["subj"]["acc"] == pytest.approx(0.5)  # two distinct pairs a side, not the four rows' 3/4
    assert record["metrics"]["obj"]["acc"] == pytest.approx((1 + 2 / 3) / 2)  # Pos and Neg weigh half each, not 3 of 4 pairs
    assert record["departures"] == [] and record["options"] == {"rule": "official", "threshold": threshold}

    pairwise = evaluate("svo_probes", tmp_path, bench_options={"svo_probes": {"rule": "pairwise"}})["svo_probes"]
    assert pairwise["metrics"]["subj"]["acc"] == pytest.approx(3 / 4)  # every row, repeats counted: compclip's own reading
    assert pairwise["departures"] and "rule=pairwise" in pairwise["departures"][0]
    svo = REGISTRY["svo_probes"]  # vl_compo's sweep column was computed pairwise: the official figures do not fill it
    assert svo.spectrum_parts(record["metrics"]) == [None] * 3 and None not in svo.spectrum_parts(pairwise["metrics"])


def test_svo_probes_without_a_match_threshold_scores_pairwise_and_records_why(tmp_path):
    """`--benchmark all` must not stop at SVO-Probes: with no threshold its official rule cannot decide a pair, so the run
    scores as `rule=pairwise` does and records that departure (the ≠ mark of `report --paper`)."""
    write_svo(tmp_path)
    unset = evaluate("svo_probes", tmp_path)["svo_probes"]
    pairwise = evaluate("svo_probes", tmp_path, bench_options={"svo_probes": {"rule": "pairwise"}})["svo_probes"]
    assert unset["metrics"] == pairwise["metrics"] and "pos_acc" not in unset["metrics"]["subj"]
    assert len(unset["departures"]) == 1 and "without a match threshold (--bench-opt svo_probes.threshold=T)" in unset["departures"][0]


# ---- ImageCoDe: the release's argsort, the first of equally scored images chosen --------------------------------------

def test_imagecode_official_ties_are_the_releases_argsort_and_strict_is_a_recorded_departure(tmp_path):
    data = tmp_path / "imagecode" / "data"
    frames = ["blue", "red", "red", "green", "blue", "blue", "yellow", "blue", "blue", "blue"]  # frames 1 and 2 identical
    video = "MSR-VTT-videoTestVideo_video7-shot2_0"
    for k, colour in enumerate(frames):
        solid(data / video / f"img{k}.jpg", colour)
    described = {"1": "a red car", "2": "a red car", "3": "a green car"}  # 1: first of two identical frames, 2: the second
    (data / "valid_data.json").write_text(json.dumps({video: described}))

    def zero_shot(index, text):  # zero_shot.py's find_best_matches: the top of (-similarities).argsort() is the target
        similarities = np.array([cosine(c, text.strip()) for c in frames], dtype=np.float16)
        return int((-similarities).argsort()[0] == index)

    official = [zero_shot(int(i), t) for i, t in described.items()]
    assert official == [1, 0, 1]
    record = evaluate("imagecode", tmp_path)["imagecode"]  # --ties official, the default
    assert record["ties"] == "clip_benchmark" and record["departures"] == []
    assert record["metrics"]["video"]["acc"] == pytest.approx(sum(official) / len(official))
    strict = evaluate("imagecode", tmp_path, ties="strict")["imagecode"]
    assert strict["metrics"]["video"]["acc"] == pytest.approx(1 / 3)  # the tie counted wrong at frame 1 as well
    assert strict["departures"] and "argsort" in strict["departures"][0]
    column = {"ImageCoDe video": {"benchmark": "imagecode", "metric": ["video"], "protocol": {}}}
    # the fixture's valid_data.json is not the release's file, which the column says too; the tie rule is the release's
    files = "imagecode: files differ from the release (imagecode/data/valid_data.json)"
    assert protocol_differences({"imagecode": record}, column, "ImageCoDe video") == [files]
    assert protocol_differences({"imagecode": strict}, column, "ImageCoDe video") == [f"imagecode: {strict['departures'][0]}", files]


# ---- CREPE: systematicity's files of the release's default pretraining, and a warning off its three sets --------------

def test_crepe_systematicity_defaults_to_cc12m_and_warns_for_a_model_of_another_pretraining(tmp_path, caplog):
    solid(tmp_path / "visual_genome" / "VG_100K" / "5.jpg", "red")
    syst = tmp_path / "crepe" / "syst_hard_negatives"
    crepe_csv(syst / "syst_vg_hard_negs_seen_compounds_in_cc12m.csv", "valid_hard_negs_atom",
              [(5, (0, 0, 16, 16), "a red car", ["a blue car"])])
    crepe_csv(syst / "syst_vg_hard_negs_seen_compounds_in_laion.csv", "valid_hard_negs_atom",
              [(5, (0, 0, 16, 16), "a blue car", ["a red car"])])
    with caplog.at_level(logging.WARNING, logger="compclip"):
        (record,) = evaluate("crepe/syst_seen_atom", tmp_path).values()
    assert record["options"]["pretraining"] == "cc12m" and record["metrics"]["syst_seen_atom"]["acc"] == 1.0  # cc12m's file
    assert len(record["departures"]) == 1 and "none of CC12M, YFCC15M, LAION-400M" in record["departures"][0]
    assert record["departures"][0] in caplog.text  # a model in memory has no pretrained tag: warned, not scored silently
    from compclip.eval.benchmarks.crepe import CREPE, Options

    crepe = CREPE()
    assert crepe.departures(Options(), "strict", "cc12m", ("syst_seen_atom",)) == []  # the release's own model
    assert "crepe.pretraining=laion" in crepe.departures(Options(), "strict", "laion400m_e32", ("syst_seen_atom",))[0]
    assert "(openai) is none of" in crepe.departures(Options(pretraining="laion"), "strict", "openai", ())[0]
    assert crepe.departures(Options(), "strict", "openai", ("prod_atom_4",)) == []  # productivity is for every model
