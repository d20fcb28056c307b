"""The field's compositionality columns (`report`'s spectrum table) against the sweep that publishes them: ytaek-oh/vl_compo
gives each model's parts (`individual_results.csv`) and one number per benchmark (`results.csv`); five of its rows, for
the ten benchmarks compclip reads, are in `data/vl_compo_rows.csv`. Each row's parts, written as `compclip eval` writes
its results, must give vl_compo's numbers through `compclip report`."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from compclip.eval.report import spectrum_table
from conftest import run_main

ROWS = pd.read_csv(Path(__file__).parent / "data" / "vl_compo_rows.csv", comment="#")
SUGARCREPE_ITEMS = {"add_att": 692, "add_obj": 2062, "replace_att": 788, "replace_obj": 1652, "replace_rel": 1406,
                    "swap_att": 666, "swap_obj": 245}  # the official files' record counts
IMAGECODE_ITEMS = {"static": 430, "video": 1872}  # the validation set's 2,302 descriptions
VALSE = {"existence": "existence", "plurals": "plurals", "counting_hard": "counting-hard", "counting_small": "counting-small-quant",
         "counting_adversarial": "counting-adversarial", "relations": "relations", "action_replacement": "action-replacement",
         "actant_swap": "actant-swap", "coreference_standard": "coreference-standard", "coreference_hard": "coreference-hard",
         "foil_it": "foil-it"}
CHECKLIST = {"Object": {"center": "Location_center", "mid": "Location_mid", "margin": "Location_margin", "large": "Size_large",
                        "medium": "Size_medium", "small": "Size_small"},
             "Attribute": {"action_a": "action", "color": "color", "material": "material", "size": "size", "state": "state"},
             "Relation": {"action_r": "action", "spatial": "spatial"}}
WHATSUP = {"controlled_a": "WhatsUp_A", "controlled_b": "WhatsUp_B", "coco_one_obj": "COCO_QA_ONE", "coco_two_obj": "COCO_QA_TWO",
           "gqa_one_obj": "VG_QA_ONE", "gqa_two_obj": "VG_QA_TWO"}
BENCHMARKS = ("aro", "crepe", "eqben", "imagecode", "sugarcrepe", "svo_probes", "valse", "vl_checklist", "whatsup", "winoground")


def results_of(row: pd.Series) -> dict[str, dict]:
    """One vl_compo row's parts as compclip's result records hold them (fractions; each benchmark's own aggregates
    computed as that benchmark computes them)."""
    part = lambda name: row[name] / 100  # noqa: E731
    valse = {ours: {"acc": part(f"valse::{theirs}"), "n": 100} for ours, theirs in VALSE.items()}
    valse.update({"counting": sum(valse[s]["acc"] for s in ("counting_hard", "counting_small", "counting_adversarial")) / 3,
                  "actions": (valse["action_replacement"]["acc"] + valse["actant_swap"]["acc"]) / 2,
                  "coreference": (valse["coreference_standard"]["acc"] + valse["coreference_hard"]["acc"]) / 2})
    checklist = {dim: {"acc": part(f"vl_checklist::{cat}_{theirs}")} for cat, dims in CHECKLIST.items() for dim, theirs in dims.items()}
    checklist.update({cat: sum(checklist[d]["acc"] for d in dims) / len(dims) for cat, dims in CHECKLIST.items()})
    imagecode = {"static": {"acc": part("imagecode::static"), "n": IMAGECODE_ITEMS["static"]},
                 "video": {"acc": part("imagecode::videos"), "n": IMAGECODE_ITEMS["video"]}}
    imagecode["overall"] = sum(m["acc"] * m["n"] for m in imagecode.values()) / sum(IMAGECODE_ITEMS.values())
    eqben = {s: {"text": part(f"eqben::{s}::text"), "group": part(f"eqben::{s}::group"), "n": 10}
             for s in ("eqbenag", "eqbenyoucook2", "eqbengebc", "eqbenkubric_loc", "eqbenkubric_attr", "eqbenkubric_cnt", "eqbensd")}
    return {
        "aro_vg_relation": {"macro": part("aro::VG_Relation")},
        "aro_vg_attribution": {"macro": part("aro::VG_Attribute")},
        "aro_order": {"coco_order": {"acc": part("aro::COCO_Order")}, "flickr30k_order": {"acc": part("aro::Flickr30k_Order")}},
        "crepe": {f"prod_{kind}": part(f"crepe::{kind}") for kind in ("atom", "swap", "negate")},
        "eqben": eqben,
        "imagecode": imagecode,
        "sugarcrepe": {s: {"acc": part(f"sugarcrepe::{s}"), "n": n} for s, n in SUGARCREPE_ITEMS.items()},
        "svo_probes": {s: {"acc": part(f"svo_probes::{s}_neg")} for s in ("subj", "verb", "obj")},
        "valse": valse,
        "vl_checklist": checklist,
        "whatsup": {ours: {"acc": part(f"whatsup::{theirs}")} for ours, theirs in WHATSUP.items()},
        "winoground": {s: part(f"winoground::{s}") for s in ("text", "image", "group")},
    }


def write_results(folder: Path, records: dict[str, dict]) -> Path:
    folder.mkdir(parents=True)
    for bench, metrics in records.items():
        (folder / f"{bench}.json").write_text(json.dumps({"benchmark": bench, "metrics": metrics}))
    return folder


def test_each_column_is_vl_compos_number_for_its_published_rows(tmp_path, capsys):
    """`compclip report` over five models' parts writes vl_compo's own ten numbers per model (to its CSV's two decimals;
    the table itself within 1e-7 of the eight decimals published), and their mean."""
    folders = [write_results(tmp_path / f"{row.arch}@{row.pretrained}", results_of(row)) for _, row in ROWS.iterrows()]
    code, _, err = run_main(capsys, "-q", "report", *folders, "--out", tmp_path / "report")
    assert code == 0, err
    written = pd.read_csv(tmp_path / "report" / "spectrum.csv", index_col="model")
    table = spectrum_table({f.name: {b: json.loads((f / f"{b}.json").read_text()) for b in results_of(ROWS.iloc[0])} for f in folders})
    assert list(table.columns) == [*BENCHMARKS, "mean of the 10"]
    for folder, (_, row) in zip(folders, ROWS.iterrows(), strict=True):
        published = [row[f"results.csv::{b}"] for b in BENCHMARKS]
        assert table.loc[folder.name, list(BENCHMARKS)].tolist() == pytest.approx(published, abs=1e-7), folder.name
        assert written.loc[folder.name, list(BENCHMARKS)].tolist() == pytest.approx(published, abs=0.005 + 1e-7)
        assert table.loc[folder.name, "mean of the 10"] == pytest.approx(sum(published) / 10, abs=1e-7)
    assert "The field's compositionality columns" in (tmp_path / "report" / "report.md").read_text()


@pytest.mark.parametrize("gone", [("aro_order", None), ("eqben", "eqbenkubric_cnt"), ("sugarcrepe", "swap_obj"),
                                  ("valse", "foil_it"), ("valse", "counting_hard"), ("vl_checklist", "spatial"), ("imagecode", "static")])
def test_a_column_with_a_part_not_scored_is_empty_never_a_mean_of_the_rest(gone):
    """ARO without its order sets, EqBen without one Kubric subset, SugarCrepe without swap-obj, ...: that column is empty
    (the others are vl_compo's numbers), and so is the mean."""
    row = ROWS.iloc[0]
    records = results_of(row)
    bench, split = gone
    if split is None:
        del records[bench]
    else:
        del records[bench][split]
    table = spectrum_table({"m": {b: {"metrics": m} for b, m in records.items()}})
    column = "aro" if bench.startswith("aro") else bench
    assert math.isnan(table.loc["m", column]) and math.isnan(table.loc["m", "mean of the 10"])
    others = [b for b in BENCHMARKS if b != column]
    assert table.loc["m", others].tolist() == pytest.approx([row[f"results.csv::{b}"] for b in others], abs=1e-7)


def test_no_column_of_the_sweep_no_section():
    """A run of SugarCrepe++ alone (not one of the sweep's benchmarks) has every column empty: `report` writes no table."""
    table = spectrum_table({"m": {"sugarcrepe_pp": {"metrics": {"swap_att": {"itt": 0.5, "tot": 0.5, "n": 3}}}}})
    assert table.iloc[:, :-1].isna().all().all()


def test_a_part_scored_on_no_item_is_not_scored():
    """A split whose images were all missing has an accuracy of NaN (n = 0) in its result, and the benchmark's `overall`
    is then the other split's alone (ImageCoDe without its static sets): the column is empty, not the videos' accuracy."""
    records = results_of(ROWS.iloc[0])
    records["imagecode"]["static"] = {"acc": float("nan"), "n": 0}
    records["imagecode"]["overall"] = records["imagecode"]["video"]["acc"]
    table = spectrum_table({"m": {b: {"metrics": m} for b, m in records.items()}})
    assert math.isnan(table.loc["m", "imagecode"]) and not math.isnan(table.loc["m", "winoground"])
