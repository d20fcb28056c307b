"""CLIP_benchmark's `--dataset` names and the zero-shot suites, as a user meets them on the command line: a suite scores
each of its sets present under the data root in one run, the same numbers as each set scored alone, names each set
absent in a line of its own and says the suite is incomplete; a single CLIP_benchmark name scores that set alone; a
mistyped name is one line with the closest names."""
from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path

import pytest

from test_zeroshot_layouts import picture, write_wds

BENCH_PATH = os.environ.get("COMPCLIP_BENCH_PATH")


def cli(tmp_path: Path, data: Path, out: str, *flags: str) -> int:
    """`compclip eval` with the tiny bundled model on the CPU, over `data`, into tmp_path/out: the exit code."""
    from compclip.cli import main

    try:
        main(["eval", "--model", "compclip-tiny-clip", *flags, "--out", str(tmp_path / out), "--data-root", str(data),
              "--workers", "0", "--device", "cpu", "--precision", "fp32"])
    except SystemExit as e:
        return e.code or 0
    return 0


def result(tmp_path: Path, out: str, name: str) -> dict:
    return json.loads((tmp_path / out / name).read_text())


def two_sets(data: Path) -> None:
    """Two of CLIC's ZS-10 as webdataset copies under the folder names people download them to: the Hub's wds_<name>
    (cifar10) and DataComp's wds_<name>_test (food101); each set's own images."""
    write_wds(data / "zeroshot" / "wds_cifar10", count=14, per_shard=8)
    write_wds(data / "zeroshot" / "wds_food101_test", count=10, per_shard=10, label_of=lambda i: (i * 5) % 6)


def test_a_suite_scores_the_sets_present_as_each_alone_and_names_the_absent(tmp_path, capsys):
    data = tmp_path / "data"
    two_sets(data)
    assert cli(tmp_path, data, "suite", "--dataset", "clic_zs10") == 0
    said = capsys.readouterr()
    assert cli(tmp_path, data, "alone", "--dataset", "cifar10,wds/food101") == 0
    suite = result(tmp_path, "suite", "zeroshot-clic_zs10.json")
    alone = {"cifar10": result(tmp_path, "alone", "zeroshot-cifar10.json")["metrics"]["cifar10"],
             "food101": result(tmp_path, "alone", "zeroshot-wds-food101.json")["metrics"]["wds/food101"]}
    for name, theirs in alone.items():
        for figure in ("acc1", "acc5", "mean_per_class_recall", "n"):
            assert suite["metrics"][name][figure] == theirs[figure], (name, figure)
    absent = ["cifar100", "cars", "fgvc_aircraft", "dtd", "pets", "caltech101", "flowers", "country211"]
    lines = (said.out + said.err).splitlines()
    for name in absent:  # each absent set: one line naming it, once
        assert len([line for line in lines if f"CLIP_benchmark's {name};" in line]) == 1, name
    summary = suite["metrics"]["suites"]["clic_zs10"]
    assert suite["complete"] is False and summary["complete"] is False
    assert (summary["members"], summary["scored"], sorted(summary["not_scored"])) == (10, 2, sorted(absent))
    assert math.isclose(summary["mean"], (alone["cifar10"]["acc1"] + alone["food101"]["acc1"]) / 2)
    assert any("zeroshot.subset=1000" in said for said in suite["departures"])  # CLIC's 1,000 images a set: said, not drawn


def test_a_file_of_names_is_a_suite_and_datacomp_takes_each_tasks_main_metric(tmp_path, capsys):
    data = tmp_path / "data"
    write_wds(data / "zeroshot" / "wds_fgvc_aircraft_test", count=12, per_shard=12, label_of=lambda i: (i * i) % 6)
    write_wds(data / "zeroshot" / "wds_vtab-pets", count=9, per_shard=9, label_of=lambda i: (2 * i + 1) % 6)
    listed = tmp_path / "webdatasets.txt"  # as CLIP_benchmark's benchmark/webdatasets.txt: one name a line
    listed.write_text("wds/fgvc_aircraft\nwds/vtab/pets\n")
    assert cli(tmp_path, data, "listed", "--dataset", str(listed)) == 0
    assert cli(tmp_path, data, "datacomp", "--dataset", "datacomp") == 0
    one = result(tmp_path, "listed", f"zeroshot-{str(listed).replace('/', '-')}.json")["metrics"]
    datacomp = result(tmp_path, "datacomp", "zeroshot-datacomp.json")
    summary = datacomp["metrics"]["suites"]["datacomp"]
    assert one["suites"][str(listed)]["complete"] is True and one["suites"][str(listed)]["scored"] == 2
    # DataComp's evaluate.py: each task's main_metric (mean_per_class_recall for FGVC Aircraft and the pets), their mean
    aircraft, pets = one["wds/fgvc_aircraft"], one["wds/vtab/pets"]
    assert math.isclose(summary["mean"], (aircraft["mean_per_class_recall"] + pets["mean_per_class_recall"]) / 2)
    assert (summary["members"], summary["scored"], datacomp["complete"]) == (38, 2, False)
    assert "misc/winogavil" in summary["why_not_scored"] and "wilds/fmow" in summary["not_scored"]


def test_a_clip_benchmark_name_scores_that_set_alone(tmp_path):
    data = tmp_path / "data"
    two_sets(data)
    for k, colour in enumerate(("red", "blue")):  # a retrieval set besides another: --dataset flickr30k scores its own
        for name in ("flickr30k", "other"):
            folder = data / "retrieval" / name
            folder.mkdir(parents=True, exist_ok=True)
            picture(k).save(folder / f"{k}.png")
            with open(folder / "captions.csv", "a") as f:
                f.write(("image,caption\n" if k == 0 else "") + f"{k}.png,a {colour} thing\n")
    assert cli(tmp_path, data, "out", "--dataset", "wds/cifar10,flickr30k") == 0
    zeroshot, retrieval = result(tmp_path, "out", "zeroshot-wds-cifar10.json"), result(tmp_path, "out", "retrieval-flickr30k.json")
    assert zeroshot["dataset"] == "zeroshot/wds/cifar10" and zeroshot["complete"] is True
    assert [k for k, v in zeroshot["metrics"].items() if isinstance(v, dict) and "acc1" in v] == ["wds/cifar10"]
    assert [k for k, v in retrieval["metrics"].items() if isinstance(v, dict)] == ["flickr30k"]


def test_a_retrieval_sets_wds_name_is_the_retrieval_benchmarks_alone_and_in_a_file_named_with_that_command(tmp_path, capsys):
    """CLIP_benchmark's benchmark/webdatasets.txt lists wds/flickr30k beside the classification sets: in a file it is named
    as not scored there, with the --dataset that scores it (not looked for under zeroshot/ and called absent), and that
    --dataset, typed as said, scores the retrieval set."""
    data = tmp_path / "data"
    write_wds(data / "zeroshot" / "wds_cifar10", count=6, per_shard=6)
    folder = data / "retrieval" / "flickr30k"
    folder.mkdir(parents=True)
    for k in range(2):
        picture(k).save(folder / f"{k}.png")
    (folder / "captions.csv").write_text("image,caption\n0.png,a red thing\n1.png,a blue thing\n")
    listed = tmp_path / "webdatasets.txt"
    listed.write_text("wds/cifar10\nwds/flickr30k\n")
    assert cli(tmp_path, data, "listed", "--dataset", str(listed)) == 0
    said = capsys.readouterr()
    summary = result(tmp_path, "listed", f"zeroshot-{str(listed).replace('/', '-')}.json")["metrics"]["suites"][str(listed)]
    assert (summary["scored"], summary["not_scored"]) == (1, ["wds/flickr30k"])
    assert "zeroshot/flickr30k absent" not in said.out + said.err
    command = re.search(r"\(--dataset (\S+)\)", summary["why_not_scored"]["wds/flickr30k"]).group(1)
    assert cli(tmp_path, data, "alone", "--dataset", command) == 0
    alone = result(tmp_path, "alone", "retrieval-flickr30k.json")
    assert alone["complete"] is True and alone["metrics"]["flickr30k"]["captions"] == 2


@pytest.mark.parametrize(("given", "expected"), [
    ("cifr10", "unknown benchmark 'cifr10' (did you mean cifar10"),
    ("tfds/cifar10", "--dataset tfds/cifar10: CLIP_benchmark opens tfds/ sets through tensorflow_datasets"),
    ("LIST", "line 2: 'vtab/cifr100': not a classification set's CLIP_benchmark name (did you mean vtab/cifar100"),
    ("wds/crossmodal3600", "--dataset wds/crossmodal3600: a multilingual set; compclip scores English captions only"),
])
def test_a_wrong_dataset_name_is_one_line_with_the_closest_names(tmp_path, capsys, given, expected):
    listed = tmp_path / "names.txt"
    listed.write_text("cifar10\nvtab/cifr100\n")
    (tmp_path / "data").mkdir()
    assert cli(tmp_path, tmp_path / "data", "out", "--dataset", str(listed) if given == "LIST" else given) != 0
    said = capsys.readouterr()
    lines = [line for line in (said.out + said.err).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_clip_benchmarks_collections_are_its_own_lists():
    if BENCH_PATH and BENCH_PATH not in sys.path:
        sys.path.append(BENCH_PATH)
    builder = pytest.importorskip("clip_benchmark.datasets.builder")
    from compclip.eval.suites import SUITES

    for name in ("vtab", "vtab+", "imagenet_robustness"):
        assert [m.name for m in SUITES[name].members] == builder.dataset_collection[name], name


def test_a_suite_for_several_models_decodes_each_image_once_and_scores_each_as_alone(tmp_path, capsys):
    """Two models of one preprocessing (the tiny model and its other weights in a checkpoint folder) over a suite: the
    second model decodes no image, takes each of the suite's images from the first, and scores as it does alone."""
    from test_sweep import checkpoint

    data = tmp_path / "data"
    two_sets(data)
    other = checkpoint(tmp_path / "other", init_seed=1)
    assert cli(tmp_path, data, "sweep", "--dataset", "clic_zs10", "--model", f"compclip-tiny-clip,{other}") == 0
    said = capsys.readouterr()
    assert "decoded 0 images, took 24 more as the sweep's models of the same preprocessing decoded them" in said.out + said.err
    assert cli(tmp_path, data, "alone", "--dataset", "clic_zs10", "--model", str(other)) == 0
    swept = result(tmp_path, "sweep", f"{folder_of(other)}/zeroshot-clic_zs10.json")["metrics"]
    alone = result(tmp_path, "alone", "zeroshot-clic_zs10.json")["metrics"]
    assert swept["suites"] == alone["suites"] and swept["cifar10"]["acc1"] == alone["cifar10"]["acc1"]


def folder_of(model: Path) -> str:
    from compclip.eval.sweep import folder_name

    return folder_name(str(model))


def test_datacomp_scores_its_retrieval_members_present_as_each_alone_and_names_the_absent(tmp_path, capsys):
    """DataComp's suite over a classification set and flickr30k's wds set (mscoco_captions absent): flickr30k is scored in
    the suite's run with the figures `--dataset flickr30k` gives alone, counted in the suite's mean by DataComp's main
    metric for retrieval (eval_utils/retr_eval.py: mean_recall@1, the mean of the text and image recall@1); mscoco's set
    is named absent in a line of its own."""
    from test_retrieval_wds import samples, write_set

    data = tmp_path / "data"
    write_wds(data / "zeroshot" / "wds_cifar10", count=12, per_shard=12)
    write_set(data / "retrieval" / "flickr30k", samples(12))  # text and image recall@1 differ: the mean is neither
    assert cli(tmp_path, data, "suite", "--dataset", "datacomp") == 0
    said = capsys.readouterr()
    assert cli(tmp_path, data, "alone", "--dataset", "flickr30k,cifar10") == 0
    suite = result(tmp_path, "suite", "zeroshot-datacomp.json")["metrics"]
    alone = result(tmp_path, "alone", "retrieval-flickr30k.json")["metrics"]["flickr30k"]
    cifar10 = result(tmp_path, "alone", "zeroshot-cifar10.json")["metrics"]["cifar10"]
    flickr = suite["retrieval/flickr30k"]
    for figure, value in alone.items():
        assert flickr[figure] == value, figure
    summary = suite["suites"]["datacomp"]
    assert (summary["scored"], summary["main_metric"]["retrieval/flickr30k"]) == (2, "mean_recall@1")
    assert "retrieval/mscoco_2014_5k_test_image_text_retrieval" in summary["not_scored"]
    recall1 = (alone["image_retrieval_recall@1"] + alone["text_retrieval_recall@1"]) / 2
    assert math.isclose(summary["mean"], (cifar10["acc1"] + recall1) / 2)
    lines = (said.out + said.err).splitlines()
    assert len([line for line in lines if str(data / "retrieval" / "mscoco_captions") in line and "absent" in line]) == 1, lines
