"""The papers' published numbers as `compclip report --paper` holds them (`eval/papers/*.json`): each row is a line of
its paper, typed in verbatim, and each value is read back from that line here, by a parser of its own, and found in the
paper's text; each column names how compclip computes it, or why it cannot; the report marks a result computed by
another protocol than the paper's."""
import dataclasses
import json
import math
import re

import pytest

from compclip.eval import REGISTRY
from compclip.eval.protocols import TIES
from compclip.eval.report import list_papers, paper_comparison, paper_markdown, paper_numbers
from conftest import shared_data, shared_paper
from test_recipes import result_folder

FIELDS = {"layout", "subset", "subset_order", "classnames_source", "templates_source", "n"}  # what a result records per dataset that a
# column's protocol may name


def cells(line: str) -> list[float | None]:
    """A paper line's value cells, left to right: a LaTeX row's cells after its label; a tab-separated row's cells; else
    each white-space token that is a number, with `\\ul` (underline) dropped and "(+0.9)" gains skipped. ".78" reads as
    78.0 (Rösch et al. print fractions); "-" and an empty cell are None."""
    def value(text: str) -> float | None:
        text = text.strip()
        if not re.fullmatch(r"\d+(\.\d+)?|\.\d+", text):
            return None
        return round(float(text) * 100, 1) if text.startswith(".") else float(text)

    if "&" in line:
        row = line.strip().removesuffix("\\\\").split("&")[1:]
        row = [re.sub(r"\\tiny\{.*?\$\}", "", c) for c in row]
        return [value(re.sub(r"\\textbf\{(.*?)\}", r"\1", c)) for c in row]
    if "\t" in line:
        return [value(c) for c in line.split("\t")]
    tokens = [t.replace("\\ul", "") for t in line.split() if not re.fullmatch(r"\(\+[\d.]+\)", t)]
    return [v for v in map(value, tokens) if v is not None]


def row_columns(numbers: dict, row: dict) -> list:
    return row.get("columns") or numbers["tables"][row["table"]]["columns"]


@pytest.mark.parametrize("paper", list_papers())
def test_every_published_number_is_read_from_its_paper_line(paper):
    numbers = paper_numbers(paper)
    text = " ".join(shared_paper(numbers["source"]).read_text(encoding="utf-8").split())
    for row in numbers["rows"]:
        assert " ".join(row["line"].split()) in text, (paper, row["model"], row["line"])
        columns = row_columns(numbers, row)
        found = cells(row["line"])[-len(columns):]
        expected = {c: v for c, v in zip(columns, found, strict=True) if c is not None and v is not None}
        assert row["values"] == expected, (paper, row["model"], row["table"])


def test_the_papers_hold_every_row_of_their_main_tables():
    counts = {p: (len(paper_numbers(p)["rows"]), sum(len(r["values"]) for r in paper_numbers(p)["rows"])) for p in list_papers()}
    assert counts == {"c2lip": (42, 464), "clic": (44, 371), "hardneg": (14, 22), "occlip": (18, 102)}
    assert {r["table"] for r in paper_numbers("c2lip")["rows"]} == {"Table 2", "Table 3", "Table 4", "Table 5"}
    assert {r["table"] for r in paper_numbers("clic")["rows"]} == {"Table 1", "Table 2", "Table 3", "Table 4",
                                                                   "Table 16", "Table 18", "Table 19"}  # the appendix's released rows
    assert {r["table"] for r in paper_numbers("hardneg")["rows"]} == {"Table 3", "Table 4"}
    assert {r["table"] for r in paper_numbers("occlip")["rows"]} == {"SugarCrepe / ARO-A", "Spatial"}


@pytest.mark.parametrize("paper", list_papers())
def test_a_papers_average_is_the_mean_of_the_columns_it_names(paper):
    """The paper's own Average cell against the mean of its printed members (each rounded to 0.1, so within 0.1)."""
    numbers = paper_numbers(paper)
    checked = 0
    for row in numbers["rows"]:
        for name, value in row["values"].items():
            members = numbers["columns"][name].get("average")
            if members and all(m in row["values"] for m in members):
                assert value == pytest.approx(sum(row["values"][m] for m in members) / len(members), abs=0.1), (row["model"], name)
                checked += 1
    assert checked == {"c2lip": 42, "clic": 0, "hardneg": 0, "occlip": 0}[paper]


@pytest.mark.parametrize("paper", list_papers())
def test_every_column_is_a_benchmark_metric_an_average_or_says_why_not(paper):
    numbers = paper_numbers(paper)
    for name, spec in numbers["columns"].items():
        if spec.get("reproducible", True) is False:
            assert spec["why"] and set(spec) == {"reproducible", "why"}, name
            continue
        if "average" in spec:
            assert set(spec["average"]) <= set(numbers["columns"]), name
            continue
        bench = REGISTRY[spec["benchmark"]]
        protocol = spec.get("protocol", {})
        assert set(protocol) <= {"ties", "options", "fields"}, name
        assert protocol.get("ties", bench.ties) in TIES and protocol.get("ties", bench.ties) == bench.ties, name
        declared = {f.name for f in dataclasses.fields(bench.Options)}
        assert set(protocol.get("options", {})) <= declared, (name, declared)
        bench.Options(**protocol.get("options", {}))  # each value one the option takes
        assert set(protocol.get("fields", {})) <= FIELDS, name


def test_the_report_marks_a_value_computed_by_another_protocol(tmp_path):
    """CLIC's retrieval is ARO's pre_caption on BLIP's Karpathy file, its ZS-10 ten datasets of 1,000 images drawn with
    seed 1, its ImageNet whole: a result computed otherwise is marked ≠ in its cell and its differences named."""
    ten = ["food101", "cifar10", "cifar100", "cars", "fgvc_aircraft", "dtd", "pets", "caltech101", "flowers", "country211"]
    theirs = {"subset_order": "CLIP_benchmark's dataset order", "classnames_source": "clip_benchmark json",
              "templates_source": "clip_benchmark json"}  # CLIC's own draw, as another tool would record it
    zs = {name: {"acc": 0.5 + i / 100, "subset": 1000, "subset_seed": 1, **theirs} for i, name in enumerate(ten)}
    coco = {"text_retrieval_recall@5": 0.8, "image_retrieval_recall@5": 0.6}
    same = result_folder(tmp_path, "same", {
        "zeroshot": {**zs, "imagenet": {"acc": 0.6, "layout": "class folders"}},
        "retrieval": {"mscoco_captions": {**coco, "layout": "coco_karpathy_test_2017.json"}},
    }, options={"zeroshot": {"subset": 1000}, "retrieval": {"captions": "pre_caption"}})
    other = result_folder(tmp_path, "other", {
        "zeroshot": {**zs, "imagenet": {"acc": 0.6, "subset": 1000, "subset_seed": 1, "layout": "class folders"}},
        "retrieval": {"mscoco_captions": {**coco, "layout": "coco_test_karpathy.json"}},
    }, options={"zeroshot": {"subset": 1000, "subset_skip": ""}})
    for folder, ties in ((same, "strict"), (other, "clip_benchmark")):  # CLIP_benchmark's argmax where the paper ran the official rule
        record = {"benchmark": "winoground", "metrics": {"text": 0.3, "image": 0.1, "group": 0.08}, "ties": ties, "options": {}}
        (folder / "winoground.json").write_text(json.dumps(record))
    from compclip.eval.report import load_results

    frame, about, not_run = paper_comparison(load_results([same, other]), "clic", "CLIC-LAION")
    assert frame.loc["Winoground text", "other protocol"] == "ties=clip_benchmark (paper: strict)"
    whole = tmp_path / "whole"  # every ZS-10 dataset scored whole; a retrieval result that records no options (another tool's)
    whole.mkdir()
    (whole / "zeroshot.json").write_text(json.dumps({"metrics": {n: {"acc": 0.5} for n in ten}, "ties": "strict", "options": {}}))
    (whole / "retrieval.json").write_text(json.dumps({"metrics": {"mscoco_captions": {**coco, "layout": "coco_karpathy_test.json"}}}))
    lone, _, _ = paper_comparison(load_results([whole]), "clic", "CLIC-LAION")
    assert lone.loc["ZS-10", "whole protocol"].startswith(
        "zeroshot.subset=unrecorded (paper: 1000); zeroshot.subset_seed=unrecorded (paper: 1); food101 subset=None (paper: 1000); ")
    assert lone.loc["MSCOCO text retrieval R@5", "whole protocol"] == (  # BLIP's 2014 Karpathy file: another split than Val2017
        "retrieval.captions=unrecorded (paper: pre_caption); retrieval.max_words=unrecorded (paper: 30); mscoco_captions "
        "layout=coco_karpathy_test.json (paper: coco_karpathy_test_2017.json)")
    assert lone.loc["MSCOCO image retrieval R@5", "whole protocol"] == lone.loc["MSCOCO text retrieval R@5", "whole protocol"]
    assert frame.loc["ZS-10", "same"] == pytest.approx(100 * sum(0.5 + i / 100 for i in range(10)) / 10)
    assert frame.loc["ZS-10", "paper"] == 61.0 and frame.loc["ImageNet", "paper"] == 61.7
    assert (frame["same protocol"] == "").all()
    assert frame.loc["ImageNet", "other protocol"] == "imagenet subset=1000 (paper: None)"
    assert frame.loc["ZS-10", "other protocol"] == ""
    # compclip's own draw: over the class folders, with the folders' names and ImageNet's templates, each said
    mine = result_folder(tmp_path, "mine", {"zeroshot": {name: {"acc": 0.5, "subset": 1000, "subset_seed": 1,
                                                                "subset_order": "class folders, then file names",
                                                                "classnames_source": "folder names", "templates_source": "imagenet"}
                                                         for name in ten}}, options={"zeroshot": {"subset": 1000}})
    drawn, _, _ = paper_comparison(load_results([mine]), "clic", "CLIC-LAION")
    said = drawn.loc["ZS-10", "mine protocol"]
    for dataset in ten:
        assert (f"{dataset} subset_order=class folders, then file names (paper: CLIP_benchmark's dataset order)" in said
                and f"{dataset} classnames_source=folder names (paper: clip_benchmark json)" in said
                and f"{dataset} templates_source=imagenet (paper: clip_benchmark json)" in said), said
    assert frame.loc["MSCOCO text retrieval R@5", "other protocol"] == (
        "retrieval.captions=raw (paper: pre_caption); mscoco_captions layout=coco_test_karpathy.json "
        "(paper: coco_karpathy_test_2017.json)")
    text = paper_markdown(frame, about, not_run)
    assert "| ImageNet | Table 2 | 61.7 | 60.0 | -1.7 | 60.0 ≠ | -1.7 |" in text
    assert "ImageNet (other): imagenet subset=1000 (paper: None)" in text
    assert "Flickr30k text retrieval R@5" in not_run


def test_subsets_of_another_size_are_marked_and_an_assumed_protocol_is_said(tmp_path):
    """Rösch's concept ranking on subsets of the paper's sizes (Table 8) is the paper's protocol; compclip's keyword rule
    finds other counts, marked ≠ with both. OC-CLIP's ARO and spatial columns are read by a protocol the paper does not
    state: the table says so, whatever the result."""
    from compclip.eval.report import load_results

    ranking = {cls: {"acc": 0.5, "n": n} for cls, n in (("object", 13270), ("color", 3907), ("location", 2527), ("size", 2601))}
    folder = result_folder(tmp_path, "mine", {"concept_ranking": ranking})
    frame, _, _ = paper_comparison(load_results([folder]), "hardneg", "CLIP ViT-B/32 (Orig.)")
    assert frame.loc["concept ranking object", "mine protocol"] == "object n=13270 (paper: 12907)"
    assert frame.loc["concept ranking color", "mine protocol"] == ""  # the paper's own count
    aro = result_folder(tmp_path, "aro", {"aro_vg_relation": {"macro": 0.6}, "sugarcrepe": {"swap_att": {"acc": 0.7, "n": 666}}})
    frame, about, not_run = paper_comparison(load_results([aro]), "occlip")
    text = paper_markdown(frame, about, not_run)
    said = text.split("A protocol compclip assumed where the paper does not state it: ")[1].split("\n")[0]
    assert "ARO relation (macro over relations: the paper does not say macro or micro" in said
    assert "COCO-spatial (the mean of the one- and two-object subsets" in said and "SC swap att" not in said


def test_an_average_column_is_the_mean_of_its_members_and_empty_without_one(tmp_path):
    """C2LIP's Table 3 average: the mean of six SugarCrepe and SugarCrepe++ attribute cells; NaN when one is missing."""
    sc = {"replace_att": {"acc": 0.9, "n": 788}, "swap_att": {"acc": 0.8, "n": 666}}
    pp = {"replace_att": {"itt": 0.7, "tot": 0.6}, "swap_att": {"itt": 0.5, "tot": 0.4}}
    full = result_folder(tmp_path, "full", {"sugarcrepe": sc, "sugarcrepe_pp": pp})
    part = result_folder(tmp_path, "part", {"sugarcrepe": sc})
    from compclip.eval.report import load_results

    frame, _, _ = paper_comparison(load_results([full, part]), "c2lip")
    assert frame.loc["Table 3 average", "full"] == pytest.approx((90 + 80 + 70 + 60 + 50 + 40) / 6)
    assert math.isnan(frame.loc["Table 3 average", "part"]) and frame.loc["Table 3 average", "paper"] == 75.7


def test_the_papers_json_is_what_the_report_reads():
    for paper in list_papers():
        json.dumps(paper_numbers(paper))  # plain JSON, no NaN


def test_a_model_of_several_seeds_stands_as_its_mean_and_interval_beside_a_papers_mean(tmp_path, capsys):
    """OC-CLIP's own rows are means over the authors' runs (printed with ±): three seeds' folders comma-joined are one
    model, its cells the mean with the half-width of Student's 95 % t-interval (computed here from the t quantile written
    out, 4.302653 for 2 degrees of freedom); a single run beside that mean is said to be one."""
    from test_recipes import run_main

    seeds = [result_folder(tmp_path, f"seed-{s}", {"sugarcrepe": {"swap_att": {"acc": acc, "n": 666}}})
             for s, acc in enumerate((0.70, 0.74, 0.78))]
    single = result_folder(tmp_path, "single", {"sugarcrepe": {"swap_att": {"acc": 0.70, "n": 666}}})
    code, out, err = run_main(capsys, "report", ",".join(map(str, seeds)), single, "--label", "OC-CLIP (3 seeds)",
                              "--label", "one run", "--out", tmp_path / "report", "--paper", "occlip")
    assert code == 0, err
    mean, sd = 74.0, 4.0  # of 70, 74 and 78
    half = 4.302653 * sd / math.sqrt(3)
    assert f"| SC swap att | SugarCrepe / ARO-A | 87.5 | {mean:.1f} ± {half:.1f} | {mean - 87.5:+.1f} | 70.0 | -17.5 |" in out
    frame = __import__("pandas").read_csv(tmp_path / "report" / "paper.csv", index_col=0)
    assert frame.loc["SC swap att", "OC-CLIP (3 seeds) ±"] == pytest.approx(half, abs=0.005)  # the CSV keeps two decimals
    assert frame.loc["SC swap att", "OC-CLIP (3 seeds) runs"] == 3 and frame.loc["SC swap att", "one run runs"] == 1
    assert "A model of several runs is their mean ± the half-width of its 95 % t-interval over the runs: OC-CLIP (3 seeds) (3 runs)." in out
    assert "The paper's row is a mean over its authors' runs (printed with ±: SugarCrepe / ARO-A); one run is one run beside it" in out
    code, out, _ = run_main(capsys, "report", seeds[1], "--out", tmp_path / "r2", "--paper", "occlip", "--paper-model", "NegCLIP")
    assert code == 0 and "The paper's row is a mean" not in out  # NegCLIP's row: one number each, as released
    code, out, _ = run_main(capsys, "report", seeds[1], "--out", tmp_path / "r3", "--paper", "clic", "--paper-model", "NegCLIP")
    said = out.split("`compclip train --recipe negclip-coco` reproduces this row and departs from its training: ")[1]
    assert said.startswith("swaps only noun phrases and adjectives") and "where NegCLIP swaps six kinds" in said


COLOURS = ("red", "blue", "green", "white", "yellow", "black", "purple", "orange", "pink", "brown", "grey", "silver")


def swap_att_root(folder, n=3):
    """`n` SugarCrepe swap-att items on generated images (each its own colour) under their COCO names: a data root
    `compclip eval` scores."""
    from PIL import Image

    (folder / "coco" / "val2017").mkdir(parents=True)
    (folder / "sugarcrepe").mkdir()
    records = {}
    for k in range(n):
        colour, other = COLOURS[k % len(COLOURS)], COLOURS[(k * 5 + 1) % len(COLOURS)]
        name = f"{k + 1:012d}.jpg"
        Image.new("RGB", (48, 40), ((60 * k) % 256, (120 + 37 * k) % 256, (200 - 50 * k) % 256)).save(folder / "coco" / "val2017" / name)
        records[str(k)] = {"filename": name, "caption": f"a {colour} cup on a {other} table",
                           "negative_caption": f"a {other} cup on a {colour} table"}
    (folder / "sugarcrepe" / "swap_att.json").write_text(json.dumps(records))
    return folder


def test_a_copied_seed_folder_is_one_run_and_a_one_split_results_protocol_is_marked(tmp_path, capsys):
    """A seed's results folder copied beside it (the same `weights_sha256`) is that run again, not a second seed: the
    model stands as one run, no ± of zero spread, and the copy is named. A run of one split (`--benchmark
    sugarcrepe/swap_att`, written as sugarcrepe-swap_att.json) scored by CLIP_benchmark's argmax, where OC-CLIP's
    SugarCrepe counts a tie wrong, is marked ≠ with that difference, as the whole benchmark's result is. Both scored a
    three-item copy of SugarCrepe's swap_att, marked ≠ as a subset of the release."""
    import shutil

    import pandas as pd

    from compclip.models import load_model, save_checkpoint
    from test_recipes import run_main

    root = swap_att_root(tmp_path / "data")
    checkpoint = save_checkpoint(load_model("compclip-tiny-clip")[0], tmp_path / "trained")  # weights in a file, hashed
    common = ("-q", "eval", "--model", checkpoint, "--benchmark", "sugarcrepe/swap_att", "--data-root", root, "--workers", "0")
    code, _, err = run_main(capsys, *common, "--out", tmp_path / "seed-0")
    assert code == 0, err
    shutil.copytree(tmp_path / "seed-0", tmp_path / "seed-1")
    code, _, err = run_main(capsys, *common, "--out", tmp_path / "argmax", "--ties", "clip_benchmark")
    assert code == 0, err
    acc = 100 * json.loads((tmp_path / "seed-0" / "sugarcrepe-swap_att.json").read_text())["metrics"]["swap_att"]["acc"]
    code, out, err = run_main(capsys, "report", f"{tmp_path / 'seed-0'},{tmp_path / 'seed-1'}", tmp_path / "argmax",
                              "--label", "mine", "--label", "argmax", "--out", tmp_path / "report", "--paper", "occlip")
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.startswith("| SC swap att |"))
    assert row.split(" | ")[3:5] == [f"{acc:.1f} ≠", f"{acc - 87.5:+.1f}"], row  # one run: its value, no ± 0.0
    assert row.split(" | ")[5] == f"{acc:.1f} ≠", row
    assert "(2 runs)" not in out and "± 0.0" not in out
    assert ("Counted once, the same weights as a run before them (a copy of its folder, not another seed): mine \\[seed-1\\] "
            "(the weights of mine \\[seed-0\\]).") in out  # (Markdown's brackets escaped)
    assert "SC swap att (argmax): ties=clip_benchmark (paper: strict)" in out
    frame = pd.read_csv(tmp_path / "report" / "paper.csv", index_col=0)
    assert json.loads((tmp_path / "seed-1" / "sugarcrepe-swap_att.json").read_text())["weights_sha256"]
    assert frame.loc["SC swap att", "mine runs"] == 1
    subset = "sugarcrepe: a subset of the release (3 of 666 items)"
    assert frame.loc["SC swap att", "argmax protocol"] == f"ties=clip_benchmark (paper: strict); {subset}"
    assert frame.loc["SC swap att", "mine protocol"] == subset


def one_byte_changed(file, into):
    """`file` copied to `into` with one letter of its first negative caption in the other case: the same records."""
    data = bytearray(file.read_bytes())
    at = data.index(b'"negative_caption": "') + len(b'"negative_caption": "')
    data[at:at + 1] = data[at:at + 1].swapcase()
    into.write_bytes(bytes(data))
    return into


def test_report_paper_marks_a_copy_of_sugarcrepe_as_a_subset_or_as_other_files_and_leaves_the_release_unmarked(
        two_models, swap_root, tmp_path, capsys):
    """SugarCrepe's swap_att scored from the release's own file (`two_models`, the file the shared data holds) stands
    beside OC-CLIP's SugarCrepe numbers unmarked, and SugarCrepe++'s beside C2LIP's; a 54-item copy of it is marked ≠ as
    a subset (54 of the release's 666 items); the release's file with one byte changed, all 666 items, as other files.
    The result records each file's SHA-256 (hashlib's here), by its path under the data root."""
    import hashlib

    import pandas as pd

    from test_recipes import run_main

    def report(folder, paper="occlip"):
        code, out, err = run_main(capsys, "report", folder, "--out", tmp_path / f"report-{folder.name}-{paper}", "--paper", paper)
        assert code == 0, err
        return pd.read_csv(tmp_path / f"report-{folder.name}-{paper}" / "paper.csv", index_col=0), out

    frame, out = report(two_models / "base")
    row = next(line for line in out.splitlines() if line.startswith("| SC swap att |"))
    assert pd.isna(frame.loc["SC swap att", "base protocol"]) and "≠" not in row, row  # no difference named
    frame, _ = report(two_models / "base", "c2lip")
    assert frame.loc[["SC swap att", "SC++ swap att ITT", "SC++ swap att TOT"], "base protocol"].isna().all()
    copy = swap_att_root(tmp_path / "copy", n=54)
    changed = tmp_path / "changed"
    (changed / "sugarcrepe").mkdir(parents=True)
    (changed / "coco").symlink_to(swap_root / "coco")
    one_byte_changed(shared_data("sugarcrepe", "swap_att.json"), changed / "sugarcrepe" / "swap_att.json")
    for root in (copy, changed):
        code, _, err = run_main(capsys, "-q", "eval", "--model", "compclip-tiny-clip", "--benchmark", "sugarcrepe/swap_att", "--data-root",
                                root, "--out", tmp_path / "results" / root.name, "--workers", "0", "--device", "cpu")
        assert code == 0, err
        record = json.loads((tmp_path / "results" / root.name / "sugarcrepe-swap_att.json").read_text())
        own = hashlib.sha256((root / "sugarcrepe" / "swap_att.json").read_bytes()).hexdigest()
        assert record["files"] == {"sugarcrepe/swap_att.json": own}
    frame, out = report(tmp_path / "results" / "copy")
    assert frame.loc["SC swap att", "copy protocol"] == "sugarcrepe: a subset of the release (54 of 666 items)"
    assert next(line for line in out.splitlines() if line.startswith("| SC swap att |")).split(" | ")[3].endswith(" ≠")
    frame, _ = report(tmp_path / "results" / "changed")
    assert frame.loc["SC swap att", "changed protocol"] == "sugarcrepe: files differ from the release (sugarcrepe/swap_att.json)"


def released_run(root, name, released, activation=None):
    """The results of `compclip eval --model ID` of one released checkpoint: SugarCrepe's swap_att and its swap family,
    recording the entry's id and, unless None (an earlier compclip's result), the activation it ran."""
    folder = result_folder(root, name, {"sugarcrepe": {"swap_att": {"acc": 0.7, "n": 666}, "swap": {"acc": 0.7}}})
    record = json.loads((folder / "sugarcrepe.json").read_text())
    record.update(released=released, **({"activation": activation} if activation else {}))
    (folder / "sugarcrepe.json").write_text(json.dumps(record))
    return folder


def test_a_row_published_with_plain_gelu_says_so_and_marks_a_run_of_the_other_activation(tmp_path):
    """C2LIP's NegCLIP row was scored with plain GELU (the row declares it, with its evidence): beside it a QuickGELU run
    of the same weights is marked ≠ naming the id that runs GELU, a GELU run (`negclip-b32-gelu`) is not, and a note beside
    the row says which ran which. CLIC's NegCLIP row was scored with the QuickGELU the weights were trained with: there the
    GELU run is the one marked. A result of an earlier compclip, which records no activation, ran the registry's QuickGELU."""
    from compclip.eval.report import load_results

    quick, gelu = released_run(tmp_path, "quick", "negclip-b32", "quickgelu"), released_run(tmp_path, "gelu", "negclip-b32", "gelu")
    earlier = released_run(tmp_path, "earlier", "negclip-b32")
    results = load_results([quick, gelu, earlier])
    frame, about, not_run = paper_comparison(results, "c2lip", "NegCLIP")
    marked = "activation=quickgelu (paper: gelu, --model negclip-b32-gelu)"
    assert frame.loc["SC swap att", "quick protocol"] == frame.loc["SC swap att", "earlier protocol"] == marked
    assert frame.loc["SC swap att", "gelu protocol"] == "" and frame.loc["SC swap att", "gelu"] == pytest.approx(70.0)
    text = paper_markdown(frame, about, not_run)
    assert "| SC swap att | Table 3 | 75.4 | 70.0 ≠ | -5.4 | 70.0 | -5.4 | 70.0 ≠ | -5.4 |" in text
    note = next(line for line in text.splitlines() if line.startswith("Note on this row: Table 3's"))
    assert note.startswith("Note on this row: Table 3's numbers of this row were computed with plain GELU (ImageNet 55.7 in Table 2")
    assert note.endswith("--model negclip-b32-gelu scores the weights so; quick ran QuickGELU (≠); gelu ran plain GELU; "
                         "earlier ran QuickGELU (≠).")
    frame, about, not_run = paper_comparison(results, "clic", "NegCLIP")
    assert frame.loc["SC swap", "gelu protocol"] == "activation=gelu (paper: quickgelu, --model negclip-b32)"
    assert frame.loc["SC swap", "quick protocol"] == frame.loc["SC swap", "earlier protocol"] == ""
    assert not any(line.startswith("Note on this row: Table") for line in paper_markdown(frame, about, not_run).splitlines())
    # another checkpoint's results beside the row are another model, not another activation of its weights
    other, _, _ = paper_comparison(load_results([released_run(tmp_path, "ce", "ce-clip-b32", "quickgelu")]), "c2lip", "NegCLIP")
    assert other.loc["SC swap att", "ce protocol"] == ""


def test_a_column_read_from_clip_benchmarks_wds_sets_is_marked_where_the_paper_read_other_files(tmp_path):
    """CLIC's ImageNet is its own ImageFolder over the validation class folders and its retrieval BLIP's file under
    pre_caption: CLIP_benchmark's wds sets (layout `wds`) are marked ≠ there. C2LIP's ImageNet is CLIP_benchmark's own,
    which its wds set is too: not marked."""
    from compclip.eval.report import load_results

    coco = {"text_retrieval_recall@5": 0.8, "image_retrieval_recall@5": 0.6}
    folders = result_folder(tmp_path, "folders", {"zeroshot": {"imagenet": {"acc": 0.6, "layout": "class folders"}}})
    wds = result_folder(tmp_path, "wds", {"zeroshot": {"imagenet": {"acc": 0.6, "layout": "wds"}},
                                          "retrieval": {"mscoco_captions": {**coco, "layout": "wds"}}},
                        options={"retrieval": {"captions": "pre_caption"}})
    frame, about, not_run = paper_comparison(load_results([folders, wds]), "clic", "CLIC-LAION")
    assert frame.loc["ImageNet", "wds protocol"] == "imagenet layout=wds (paper: class folders or imagenet1k)"
    assert frame.loc["ImageNet", "folders protocol"] == ""
    assert frame.loc["MSCOCO text retrieval R@5", "wds protocol"] == "mscoco_captions layout=wds (paper: coco_karpathy_test_2017.json)"
    assert "| ImageNet | Table 2 | 61.7 | 60.0 | -1.7 | 60.0 ≠ | -1.7 |" in paper_markdown(frame, about, not_run)
    c2lip, _, _ = paper_comparison(load_results([wds]), "c2lip")
    assert c2lip.loc["ImageNet", "wds protocol"] == ""
