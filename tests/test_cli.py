"""The command line, run as a user runs it: a real `compclip` process."""
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import open_clip
import pytest
import torch
from PIL import Image

from compclip.models import load_model, save_checkpoint
from conftest import run_main


def compclip(*args, cwd=None):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}  # rich wraps tables at 80
    return subprocess.run([sys.executable, "-m", "compclip", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_help_lists_the_commands():
    result = compclip("--help")
    assert result.returncode == 0
    for command in ("version", "export", "demo", "--quiet"):
        assert command in result.stdout


def test_version(capsys):
    import compclip as pkg

    code, out, _ = run_main(capsys, "version")
    assert code == 0 and out.startswith(f"compclip {pkg.__version__}\n")
    assert f"open-clip-torch {open_clip.__version__}" in out


def test_progress_writes_lines_not_bars_where_stderr_is_a_file(capsys, monkeypatch):
    """A log (here pytest's capture, not a terminal) gets one line a minute and one at the end, never a bar's redraws,
    and nothing from a bar done within seconds."""
    from compclip import progress

    assert list(progress.progress(range(5), "scoring", unit="batch")) == list(range(5))
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "QUIET_UNDER", 0.0)
    assert list(progress.progress(range(5), "scoring", unit="batch")) == list(range(5))
    err = capsys.readouterr().err
    assert "\r" not in err and len(err.splitlines()) == 1 and err.startswith("scoring: 5batch ")
    monkeypatch.setattr(progress, "LINE_EVERY", 0.0)
    assert list(progress.progress(range(3), "training", total=3, unit="step")) == [0, 1, 2]
    lines = capsys.readouterr().err.splitlines()
    assert [line.split("|")[0] for line in lines] == ["training:  33%", "training:  67%", "training: 100%"]


def test_the_study_is_one_flag(capsys):
    import inspect

    from compclip.cli import demo
    from compclip.demo import METHODS, SEEDS, STUDY, study_protocol

    given = inspect.signature(demo).parameters  # the command line's defaults are the ones --study compares against
    assert (given["methods"].default.default, given["seeds"].default.default) == (METHODS, SEEDS)
    assert study_protocol(METHODS, SEEDS, None) == (STUDY["methods"], "0,1,2", "0,1,2")
    assert {"hardneg", "clic", "occlip", "attswap", "ceclip", "svlc", "dac", "conclip", "tripletclip"} <= set(STUDY["methods"].split(","))
    code, _, err = run_main(capsys, "demo", "--study", "--seeds", "4")
    assert code == 2 and err.strip() == "error: --study sets the methods, seeds and worlds itself: drop --seeds"


@pytest.mark.parametrize("given, said", [
    (["--methods", "siglip,c2lip,siglip"], "--methods siglip,c2lip,siglip: names siglip twice (its runs would share one folder)"),
    (["--seeds", "0,-1"], "--seeds: '0,-1': a seed is at least 0"),
    (["--world-seeds", "-3"], "--world-seeds: '-3': a seed is at least 0"),
    (["--workers", "0"], "--workers must be at least 1, not 0"),
    (["--world", "heldout"], "--world 'heldout': expected KEY=VALUE, e.g. heldout=0.5"),
])
def test_the_demo_refuses_its_edge_inputs_before_it_writes(tmp_path, capsys, given, said):
    """A method twice trained one run folder twice over; a negative seed failed in numpy; no worker failed after the
    world was drawn, naming world generation's --shard-size; a malformed --world gave KEY=VALUE as its own example."""
    code, _, err = run_main(capsys, "demo", "--out", tmp_path / "demo", *given)
    assert code == 2 and err.strip() == f"error: {said}"
    assert not (tmp_path / "demo").exists()


def test_the_demo_reads_its_table_in_one_line():
    from compclip.demo import reading

    def table(control, siglip):
        row = lambda swap, shape: {"seen": {"SC swap-att": swap, "ZS shape": shape}, "unseen": {"SC swap-att": [40.0] * len(swap)}}  # noqa: E731
        return {"base": row([50.0], [98.0]), "siglip-ft": row(siglip, [90.0, 91.0]), "attswap-ft": row(control, [70.0, 72.0])}

    said = reading(table([80.0, 90.0], [55.0, 56.0]))
    assert said.startswith("The positive control (attswap) binds the pairings it saw: 85.0 % seen swap-attribute (chance 50; unseen 40.0)")
    assert "whether that method binds: base 50.0, siglip-ft 55.5." in said
    assert said.endswith("What it costs, zero-shot shape (seen): base 98.0, siglip-ft 90.5, attswap-ft 71.0.")
    assert "\n" not in said
    assert reading(table([49.0, 49.4], [50.0, 51.0])).startswith("The positive control (attswap) does not bind: 49.2 % seen swap-attribute")
    assert "cannot show binding" in reading(table([79.9, 79.9], [50.0, 51.0]))


def test_export_writes_a_file_open_clip_loads(tmp_path, capsys):
    model, _, tokenizer = load_model("compclip-tiny-clip")
    save_checkpoint(model, tmp_path / "ckpt")
    code, out, err = run_main(capsys, "export", tmp_path / "ckpt", tmp_path / "out.safetensors")
    assert code == 0, err
    assert "open_clip.create_model_and_transforms('compclip-tiny-clip'" in out
    plain = open_clip.create_model("compclip-tiny-clip", pretrained=str(tmp_path / "out.safetensors")).eval()
    with torch.no_grad():
        tokens = tokenizer(["a red couch"])
        assert torch.equal(plain.encode_text(tokens), model.encode_text(tokens))


def test_user_errors_are_one_line_not_a_traceback(tmp_path, capsys):
    code, _, err = run_main(capsys, "export", tmp_path / "nothing", tmp_path / "out.safetensors")
    assert code == 2
    assert err.strip() == f"error: {tmp_path / 'nothing'}: no such folder (a compclip checkpoint is a folder)"


def test_a_locale_that_cannot_spell_file_names_is_said_once(tmp_path):
    """LANG=C on a system whose Python keeps the C locale (UTF-8 mode and coercion off): file names are ASCII, and an
    image named "café.jpg" cannot be opened. The command says so once, with the fix; a UTF-8 locale says nothing."""
    from PIL import Image

    Image.new("RGB", (8, 8)).save(tmp_path / "café.jpg")
    narrow = {**os.environ, "LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
    probe = [sys.executable, "-c", "import os, sys; os.stat(sys.argv[1] + '/caf\\xe9.jpg')", str(tmp_path)]
    assert "UnicodeEncodeError" in subprocess.run(probe, env=narrow, capture_output=True, text=True).stderr  # the fault is real
    for env, said in ((narrow, 1), ({**os.environ, "LC_ALL": "C.UTF-8"}, 0)):
        result = subprocess.run([sys.executable, "-m", "compclip", "-q", "benchmarks"], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0
        assert result.stderr.count("this locale's file-name encoding is ascii: files whose names it cannot spell (not ASCII) "
                                   "cannot be opened; run with a UTF-8 locale (export LC_ALL=C.UTF-8)") == said, result.stderr


def test_demo_runs_end_to_end(tmp_path, capsys):
    """`make demo`'s pipeline at toy size: world, concepts, pretraining, two methods over two seeds, evaluation, report
    with intervals and paired differences computed again here from the per-seed result files. (OC-CLIP's checkpoints
    score every world benchmark through its binding module in tests/test_occlip.py.) The two runs that train go through
    compclip's entry point in this process; the two that reuse everything are fresh processes, whose whole stderr is
    read."""
    from compclip.eval.report import column_value
    from compclip.stats import fmt_difference, paired

    args = ["--quiet", "demo", "--out", str(tmp_path / "demo"), "--n-train", "300", "--n-test", "40",
            "--pretrain-steps", "3", "--pretrain-batch-size", "24", "--steps", "2", "--batch-size", "16",
            "--methods", "siglip,c2lip", "--seeds", "5,6",
            "--device", "cpu"]
    code, out, err = run_main(capsys, *args)
    assert code == 0, err[-2000:]
    # stdout is no terminal here, as in a log: the table comes as Markdown, not drawn in box characters 80 columns wide
    assert re.search(r"^\| c2lip-ft \| unseen \| [^|]+ \|", out, re.M) and "| SC swap-att |" in out
    assert "│" not in out
    for model in ("base", "siglip-ft", "c2lip-ft"):
        for split in ("seen", "unseen"):
            record = json.loads((tmp_path / "demo" / "results" / model / split / "sugarcrepe.json").read_text())
            assert record["complete"] and record["metrics"]["swap_att"]["n"] > 0
    assert "| c2lip-ft/unseen |" in (tmp_path / "demo" / "report" / "report.md").read_text()
    train_args = lambda run, step: json.loads((tmp_path / "demo" / "train" / run / "checkpoints" / f"step_{step:07d}" / "config.json")  # noqa: E731
                                              .read_text())["train_args"]
    # 3 base steps over the curriculum's 600 / 1,800 / 1,000 shares (at least 1 each): shapes, single objects, scenes and singles
    shapes, singles, base = train_args("base-shapes", 1), train_args("base-singles", 2), train_args("base", 1)
    world = tmp_path / "demo" / "world"
    assert shapes["model"] == "compclip-tiny-world"
    assert shapes["caption_key"] == "shape_caption" and singles["caption_key"] == base["caption_key"] == "caption"
    assert shapes["train_data"] == singles["train_data"] == str(world / "singles" / "images.npy")
    assert base["train_data"] == f"{world / 'train' / 'images.npy'}::{world / 'singles' / 'images.npy'}"
    assert singles["model"] == str(tmp_path / "demo" / "train" / "base-shapes" / "checkpoints" / "step_0000001")
    assert base["model"] == str(tmp_path / "demo" / "train" / "base-singles" / "checkpoints" / "step_0000002")
    config = json.loads((tmp_path / "demo" / "train" / "c2lip" / "checkpoints" / "step_0000002" / "config.json").read_text())
    assert config["method"] == "c2lip" and config["train_args"]["seed"] == 5
    assert shapes["batch_size"] == base["batch_size"] == 24 and config["train_args"]["batch_size"] == 16  # each stage its own
    assert shapes["device"] == config["train_args"]["device"] == "cpu"
    assert json.loads((tmp_path / "demo" / "results" / "c2lip-ft" / "seen" / "zeroshot.json").read_text())["precision"] == "fp32"
    assert config["train_args"]["model"] == str(tmp_path / "demo" / "train" / "base" / "checkpoints" / "step_0000001")
    again_seed = json.loads((tmp_path / "demo" / "train" / "c2lip-s6" / "checkpoints" / "step_0000002" / "config.json").read_text())
    assert again_seed["train_args"]["seed"] == 6 and again_seed["train_args"]["model"] == config["train_args"]["model"]
    swap = {m: [column_value({"sugarcrepe": json.loads((tmp_path / "demo" / "results" / f / "unseen" / "sugarcrepe.json").read_text())},
                             "SC swap-att") for f in (m, f"{m}-s6")] for m in ("siglip-ft", "c2lip-ft")}
    row = next(line for line in (tmp_path / "demo" / "report" / "seeds.md").read_text().splitlines()
               if line.startswith("| c2lip-ft − siglip-ft | unseen |"))
    assert row.split(" | ")[5] == fmt_difference(*paired(swap["c2lip-ft"], swap["siglip-ft"])), row
    assert json.loads((tmp_path / "demo" / "report" / "seeds.json").read_text())["seeds"] == [5, 6]
    assert "](attention.png)" in (tmp_path / "demo" / "report" / "seeds.md").read_text()
    assert Image.open(tmp_path / "demo" / "report" / "attention.png").size[0] > 224
    assert "](seeds.png)" in (tmp_path / "demo" / "report" / "seeds.md").read_text()
    assert Image.open(tmp_path / "demo" / "report" / "seeds.png").size[0] > 800

    # a second world (seed 7) with its own base; the first world (seed 5, the first of --seeds) is this folder's
    code, _, err = run_main(capsys, *args[:-6], "--methods", "siglip,c2lip", "--seeds", "5,6", "--world-seeds", "5,7", "--device", "cpu")
    assert code == 0, err[-2000:]
    other = tmp_path / "demo" / "worlds" / "seed-7"
    assert json.loads((other / "world" / "manifest.json").read_text())["config"]["seed"] == 7
    differences = []  # per world: the mean over seeds of C2LIP minus the mean of SigLIP
    for root in (tmp_path / "demo", other):
        records = {f: {"sugarcrepe": json.loads((root / "results" / f / "unseen" / "sugarcrepe.json").read_text())}
                   for m in ("siglip-ft", "c2lip-ft") for f in (m, f"{m}-s6")}
        swap = {m: statistics.mean(column_value(records[f], "SC swap-att") for f in (m, f"{m}-s6")) for m in ("siglip-ft", "c2lip-ft")}
        differences.append(swap["c2lip-ft"] - swap["siglip-ft"])
    half = 12.7062047 * statistics.stdev(differences) / math.sqrt(2)  # Student's t, 1 degree of freedom (t_0.975)
    markdown = (tmp_path / "demo" / "report" / "seeds.md").read_text()
    row = next(line for line in markdown.splitlines() if line.startswith("| c2lip-ft − siglip-ft | unseen |"))
    assert row.split(" | ")[5] == fmt_difference(statistics.mean(differences), half), row
    assert "binding worlds 5,7, each with its own base" in markdown and "# world 7 alone" in markdown
    summary = json.loads((tmp_path / "demo" / "report" / "seeds.json").read_text())
    assert summary["world_seeds"] == [5, 7] and len(summary["results"]["base"]["unseen"]["ZS shape"]) == 2

    # the same two worlds run apart (everything reused), each in its own folder, then tabulated by research/study_table.py
    # as the one run above tabulated them, but for the attention figure, which needs the models
    reports, trained = [], {p: p.stat().st_mtime_ns for p in (tmp_path / "demo").rglob("train/*/checkpoints/*/model.safetensors")}
    for w, root in ((5, tmp_path / "demo"), (7, other)):
        alone = compclip(*args[1:3], str(root), *args[4:-6], "--methods", "siglip,c2lip", "--seeds", "5,6", "--world-seeds", str(w),
                         "--device", "cpu")
        # everything is reused: nothing is trained again; into a pipe, bars done in seconds print nothing
        assert alone.returncode == 0 and alone.stderr == "", alone.stderr[-2000:]
        reports.append(tmp_path / f"world-{w}.json")
        reports[-1].write_bytes((root / "report" / "seeds.json").read_bytes())
    script = Path(__file__).parents[1] / "research" / "study_table.py"
    table = subprocess.run([sys.executable, script, *map(str, reports), "--out", str(tmp_path / "table")], capture_output=True,
                           text=True, timeout=300)
    assert table.returncode == 0, table.stderr[-2000:]
    assert (tmp_path / "table" / "seeds.md").read_text() == markdown.split("\n![attention")[0]
    assert json.loads((tmp_path / "table" / "seeds.json").read_text()) == summary
    assert Image.open(tmp_path / "table" / "seeds.png").size[0] > 800
    assert {p: p.stat().st_mtime_ns for p in trained} == trained and len(trained) == 14  # 3 base runs and 4 fine-tunes, both worlds
    twice = subprocess.run([sys.executable, script, str(reports[0]), str(reports[0]), "--out", str(tmp_path / "x")],
                           capture_output=True, text=True, timeout=300)
    assert twice.returncode != 0 and "world 5 is already in an earlier file" in twice.stderr


def test_unknown_model_in_eval_is_one_error_line(capsys, tmp_path):
    code, _, err = run_main(capsys, "eval", "--model", "nope", "--benchmark", "sugarcrepe", "--out", tmp_path / "x", "--data-root",
                            tmp_path)
    assert_one_error(code, err, "unknown model 'nope'")


def test_a_model_path_that_is_no_folder_says_so_and_where_it_stops(capsys, tmp_path):
    """`--model runs/nonexistent_run` is a path mistyped, not an unknown open_clip name: "no such folder", naming the part
    that exists; open_clip's own `ViT-B/32` spelling is still its model."""
    (tmp_path / "runs").mkdir()
    for model, said in ((tmp_path / "runs" / "c2lip" / "checkpoints", f"{tmp_path / 'runs'} has no c2lip"),
                        ("m/nonexistent_run", "m/nonexistent_run: no such folder")):
        code, _, err = run_main(capsys, "eval", "--model", model, "--benchmark", "sugarcrepe", "--out", tmp_path / "x", "--data-root",
                                tmp_path)
        assert_one_error(code, err, f"{model}: no such folder", said)
        assert "unknown model" not in err
    assert load_model("ViT-B/32")[0].visual.conv1.kernel_size == (32, 32)


def test_csv_without_the_caption_column_is_one_error_line(capsys, tmp_path):
    (tmp_path / "c.csv").write_text("image,text\na.jpg,a red cube\n")
    code, _, err = run_main(capsys, "concepts", tmp_path / "c.csv", "--out", tmp_path / "store")
    assert_one_error(code, err, str(tmp_path / "c.csv"), "no column 'caption'", "--caption-key")


def test_concept_store_without_pos_for_clic_is_one_error_line(capsys, tmp_path):
    from compclip.concepts import build_store

    build_store(["a red cube. a blue ball."], tmp_path / "store", "noun-phrases", workers=1)
    (tmp_path / "d.csv").write_text("image,caption\na.jpg,a red cube. a blue ball.\n")
    code, _, err = run_main(capsys, "train", "--method", "clic", "--model", "compclip-tiny-clip", "--train-data", tmp_path / "d.csv",
                            "--concepts", tmp_path / "store", "--out", tmp_path / "run", "--steps", "1")
    assert_one_error(code, err, "['pos']", str(tmp_path / "store"), "--what pos")


def assert_one_error(code: int, err: str, *fragments: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture
def pairs_csv(tmp_path):
    """A CSV whose one image exists: a valid --train-data."""
    Image.new("RGB", (16, 16), (200, 30, 30)).save(tmp_path / "a.jpg")
    (tmp_path / "pairs.csv").write_text("image,caption\na.jpg,a red square\n")
    return tmp_path / "pairs.csv"


TRAIN_CASES = {
    "negative steps": (["--steps", "-5"], ["--steps must be at least 1, not -5"]),
    "zero batch": (["--batch-size", "0"], ["--batch-size must be at least 1, not 0"]),
    "too many workers": (["--workers", "65"], ["--workers must be at most 64"]),
    "negative shuffle buffer": (["--shuffle", "-1"], ["--shuffle must be at least 0, not -1"]),
    "unknown optimizer": (["--optimizer", "adamx"], ["--optimizer must be one of adam, adamw, sgd, not 'adamx'"]),
    "zero lr": (["--lr", "0"], ["--lr and --eps must be positive"]),
    "beta of one": (["--beta2", "1.0"], ["--beta1 and --beta2 must lie in [0, 1)"]),
    "bad device": (["--device", "tpu"], ["--device must be cpu or cuda"]),
    "missing image root": (["--image-root", "nowhere"], ["--image-root nowhere: no such folder"]),
    "not an integer": (["--steps", "many"], ["Invalid value for '--steps'", "(see `compclip train --help`)"]),
    "misspelled option": (["--lr-rate", "2"], ["No such option: --lr-rate"]),
    "misspelled method option": (["--method", "c2lip", "--method-opt", "lamda_npc=2"],
                                 ["method c2lip has no option lamda_npc (did you mean lambda_npc?)",
                                  "its options: caption_concept, concept_mode, concept_phrases, lambda_npc, lambda_xac, npc_negatives, "
                                  "xac_attention, xac_temperature"]),
    "method option of another method": (["--method-opt", "negatives=2"], ["method siglip has no option negatives"]),
    "method option of the wrong type": (["--method", "hardneg", "--method-opt", "negatives=two"],
                                        ["--method-opt negatives=two: expected int"]),
    "method option without a value": (["--method-opt", "negatives"], ["--method-opt 'negatives': expected KEY=VALUE"]),
    "unknown method": (["--method", "c3lip"],
                       ["unknown method 'c3lip' (did you mean clip or c2lip?); known: attswap, c2lip, ceclip, clic, clip, conclip, dac, "
                        "hardneg, negclip, occlip, siglip, svlc, tripletclip"]),
    **({} if torch.cuda.is_available() else {"cuda without a GPU": (["--device", "cuda"], ["--device cuda: torch sees no GPU here"])}),
}


@pytest.mark.parametrize("case", list(TRAIN_CASES))
def test_train_checks_every_option_before_writing(capsys, tmp_path, pairs_csv, case):
    extra, fragments = TRAIN_CASES[case]
    args = ["train", "--method", "siglip", "--model", "compclip-tiny-clip", "--train-data", pairs_csv, "--out", tmp_path / "run", *extra]
    assert_one_error(*run_main(capsys, *args)[::2], *fragments)
    assert not (tmp_path / "run").exists()


def test_train_out_that_is_a_file_is_one_error_line(capsys, tmp_path, pairs_csv):
    (tmp_path / "taken").write_text("not a folder")
    code, _, err = run_main(capsys, "train", "--method", "siglip", "--model", "compclip-tiny-clip", "--train-data", pairs_csv,
                            "--out", tmp_path / "taken")
    assert_one_error(code, err, f"--out {tmp_path / 'taken'} is a file")
    assert (tmp_path / "taken").read_text() == "not a folder"


def test_train_with_no_readable_image_names_the_first_missing_one(capsys, tmp_path):
    (tmp_path / "pairs.csv").write_text("image,caption\n" + "".join(f"p{i}.jpg,photo {i}\n" for i in range(6)))
    code, _, err = run_main(capsys, "--quiet", "train", "--method", "siglip", "--model", "compclip-tiny-clip", "--train-data",
                            tmp_path / "pairs.csv", "--out", tmp_path / "run", "--batch-size", "2", "--workers", "0")
    last = err.strip().splitlines()[-1]  # after the reader's logged skips
    assert_one_error(code, last, "6 missing image", "no full batch of 2", f"the first missing image is {tmp_path / 'p0.jpg'}",
                     f"{tmp_path / 'pairs.csv'}:2", "--image-root")


def test_train_finds_images_in_an_images_folder_or_image_root(tmp_path):
    """One rule for every reader: paths relative to the data file's folder, or its images/, or --image-root."""
    from compclip.data import open_reader

    (tmp_path / "images").mkdir()
    (tmp_path / "elsewhere").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "images" / "a.jpg")
    Image.new("RGB", (8, 8)).save(tmp_path / "elsewhere" / "b.jpg")
    (tmp_path / "pairs.csv").write_text("image,caption\na.jpg,one\nb.jpg,two\n")
    (tmp_path / "caps.json").write_text(json.dumps({"a.jpg": "one", "b.jpg": "two"}))
    for data in ("pairs.csv", "caps.json"):
        assert [s["caption"] for s in open_reader(tmp_path / data)] == ["one"]
        assert [s["caption"] for s in open_reader(tmp_path / data, image_root=tmp_path / "elsewhere")] == ["two"]


@pytest.mark.parametrize("args, fragments", [
    (["--batch-size", "0"], ["--batch-size must be at least 1, not 0"]),
    (["--ties", "loose"], ["--ties must be one of official, strict, clip_benchmark, not 'loose'"]),
    (["--benchmark", "sugarcrepe,wino"], ["unknown benchmark 'wino' (did you mean winoground?); known: "]),
    (["--benchmark", "sugarcrepe/swap"], ["--benchmark sugarcrepe/swap: sugarcrepe has no split 'swap' (did you mean swap_att or "
                                          "swap_obj?); its splits: add_obj"]),
    (["--benchmark", "winoground/x"], ["winoground has no split 'x'; it has no splits"]),
    (["--bench-opt", "vl_checklist.pairs=zip"], ["--bench-opt vl_checklist.*: vl_checklist is not among the benchmarks run (sugarcrepe)"]),
    (["--benchmark", "vl_checklist", "--bench-opt", "vl_checklist.pair=zip"],
     ["benchmark vl_checklist has no option pair (did you mean pairs?); its options: max_per_file, pairs (see `compclip benchmarks`)"]),
    (["--benchmark", "vl_checklist", "--bench-opt", "vl_checklist.max_per_file=a"],
     ["--bench-opt vl_checklist.max_per_file=a: expected int"]),
    (["--benchmark", "vl_checklist", "--bench-opt", "pairs=zip"], ["--bench-opt 'pairs=zip': expected NAME.KEY=VALUE"]),
    (["--precision", "fp8"], ["--precision must be one of fp32, amp_bf16, amp, not 'fp8'"]),
    (["--device", "cuda:x"], ["--device must be cpu, cuda or cuda:N, not 'cuda:x'"]),
])
def test_eval_checks_options_before_loading_anything(capsys, tmp_path, args, fragments):
    base = {"--model": "compclip-tiny-clip", "--benchmark": "sugarcrepe", "--out": str(tmp_path / "out"), "--data-root": str(tmp_path)}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    code, _, err = run_main(capsys, "eval", *[x for kv in base.items() for x in kv])
    assert_one_error(code, err, *fragments)
    assert not (tmp_path / "out").exists()


def test_a_bundled_model_gives_the_same_results_in_every_process(tmp_path, capsys):
    """A bundled model's random weights are its seed's, whatever else a process did first: a fresh `compclip eval`
    process scores as this one does after the tests before it."""
    folder = tmp_path / "data" / "retrieval" / "three"
    folder.mkdir(parents=True)
    for i, colour in enumerate(("red", "green", "blue")):
        Image.new("RGB", (32, 32), colour).save(folder / f"{i}.png")
    (folder / "captions.csv").write_text("image,caption\n0.png,a red square\n1.png,a green square\n2.png,a blue square\n")
    records = []
    for run in ("a", "b"):
        args = ("-q", "eval", "--model", "compclip-tiny-siglip", "--benchmark", "retrieval", "--out", str(tmp_path / run),
                "--data-root", str(tmp_path / "data"), "--device", "cpu", "--workers", "0")
        if run == "a":
            result = compclip(*args)
            assert result.returncode == 0, result.stderr
        else:
            code, _, err = run_main(capsys, *args)
            assert code == 0, err
        record = json.loads((tmp_path / run / "retrieval.json").read_text())
        records.append({k: v for k, v in record.items() if k != "seconds"})
    assert records[0] == records[1] and records[0]["metrics"]["three"]["captions"] == 3


def test_other_commands_check_their_options(capsys, tmp_path):
    (tmp_path / "c.csv").write_text("caption\na red cube\n")
    assert_one_error(*run_main(capsys, "concepts", tmp_path / "c.csv", "--out", tmp_path / "s", "--workers", "0")[::2], "--workers")
    assert_one_error(*run_main(capsys, "world", "generate", "--out", tmp_path / "w", "--n-train", "0")[::2], "--n-train must be at least 1")
    assert_one_error(*run_main(capsys, "demo", "--out", tmp_path / "d", "--methods", "siglip,c2lip+nope")[::2], "--methods: unknown")
    assert_one_error(*run_main(capsys, "demo", "--out", tmp_path / "d", "--device", "tpu")[::2], "--device must be cpu or cuda")
    assert_one_error(*run_main(capsys, "demo", "--out", tmp_path / "d", "--world-seeds", "1,1")[::2], "--world-seeds: '1,1' repeats a seed")
    if not torch.cuda.is_available():
        assert_one_error(*run_main(capsys, "demo", "--out", tmp_path / "d", "--device", "cuda")[::2], "torch sees no GPU")
    for setting, fragment in (("nope=1", "KEY one of n_val, n_singles, heldout,"), ("seed=3", "(seed is set by --seeds or --world-seeds)"),
                              ("saliency=maybe", "saliency=maybe: expected true or false"), ("density", "expected KEY=VALUE"),
                              ("n_singles=0", "--world n_singles must be at least 1")):
        assert_one_error(*run_main(capsys, "demo", "--out", tmp_path / "d", "--world", setting)[::2], fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv"]


def test_quiet_and_verbose_work_after_the_command(capsys, tmp_path):
    code, out, _ = run_main(capsys, "version", "--quiet")
    assert code == 0 and out.startswith("compclip ")
    assert_one_error(*run_main(capsys, "export", tmp_path / "none", tmp_path / "x", "-v")[::2], "no such folder")


def test_eval_with_every_image_missing_exits_1_and_writes_strict_json(tmp_path, capsys, monkeypatch):
    data = tmp_path / "data"
    (data / "sugarcrepe_pp").mkdir(parents=True)
    for split in ("replace_obj", "replace_att", "replace_rel", "swap_obj", "swap_att"):
        rows = [{"id": 0, "filename": "000000000001.jpg", "caption": "a red car", "caption2": "a car that is red",
                 "negative_caption": "a blue car"}]
        (data / "sugarcrepe_pp" / f"{split}.json").write_text(json.dumps(rows))
    (data / "retrieval" / "tiny").mkdir(parents=True)
    (data / "retrieval" / "tiny" / "captions.csv").write_text("image,caption\ngone.jpg,a dog\n")
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps tables at 80
    code, out, err = run_main(capsys, "eval", "--model", "compclip-tiny-clip", "--benchmark", "sugarcrepe_pp,retrieval", "--data-root",
                              data, "--out", tmp_path / "out", "--workers", "0")
    assert code == 1, err[-2000:]
    assert "retrieval: nothing evaluated (all 1 images missing, e.g." in out
    assert "sugarcrepe_pp: " in out and "overall_itt n/a" in out  # TOT is text only: still scored

    def no_constants(name):
        raise AssertionError(f"bare {name} in JSON")

    for name in ("sugarcrepe_pp", "retrieval"):
        record = json.loads((tmp_path / "out" / f"{name}.json").read_text(), parse_constant=no_constants)
        assert record["complete"] is False and record["null_metrics"]["why"].startswith("no example could be scored")
    pp = json.loads((tmp_path / "out" / "sugarcrepe_pp.json").read_text())
    assert pp["metrics"]["swap_att"]["itt"] is None and pp["metrics"]["swap_att"]["tot"] is not None
    assert "swap_att.itt" in pp["null_metrics"]["metrics"]


def test_help_explains_every_option_and_lists_the_names(capsys):
    from compclip.eval import REGISTRY
    from compclip.methods import list_methods

    helps = {}
    for command in ("train", "eval", "concepts", "attention", "demo", "report", "export"):
        code, out, _ = run_main(capsys, command, "--help")
        assert code == 0
        helps[command] = out
        options = re.findall(r"^  (--[a-z-]+)(.*)$", out, re.M)
        assert options, out
        for name, rest in options:  # each option line carries its own help text
            assert rest.strip(), f"{command} {name} has no help"
        assert "<bool>" not in out
    flat = {command: " ".join(text.split()) for command, text in helps.items()}  # the help as one line, unwrapped
    assert "`compclip methods` lists them" in flat["train"] and "`compclip methods` lists them" in flat["demo"]
    assert "`compclip benchmarks` lists them" in flat["eval"]
    listed = run_main(capsys, "methods")[1] + run_main(capsys, "benchmarks")[1]
    assert all(re.search(rf"^{name}\b", listed, re.M) for name in [*list_methods(), *REGISTRY])
    assert "[default: 1e-05]" in helps["train"] and "--device" in helps["train"] and "[default:" in helps["train"].split("--device")[1]


PLUGIN = """
import dataclasses
from compclip.methods import option, register_method
from compclip.methods.siglip import build


@dataclasses.dataclass(frozen=True)
class Options:
    margin: float = option(0.25, "How far a positive must beat its negatives.")


register_method("outside", lambda options, **kw: build(None, **kw), Options, ("pos",))
"""


def test_a_method_from_another_package_reaches_the_command_line(tmp_path):
    """An installed package's `compclip.methods` entry point registers its method: the listing, the flag parsing and the
    concept check see it with no edit to compclip."""
    (tmp_path / "outside_method.py").write_text(PLUGIN)
    info = tmp_path / "outside_method-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: outside-method\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[compclip.methods]\noutside = outside_method\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]), "HF_HUB_OFFLINE": "1"}
    listing = subprocess.run([sys.executable, "-m", "compclip", "methods"], capture_output=True, text=True, env=env)
    assert listing.returncode == 0, listing.stderr
    assert "outside (reads concepts: --what pos)\n  margin=0.25: How far a positive must beat its negatives." in listing.stdout
    (tmp_path / "c.csv").write_text("image,caption\nx.png,a red cube\n")
    run = subprocess.run([sys.executable, "-m", "compclip", "train", "--method", "outside", "--model", "compclip-tiny-siglip",
                          "--train-data", str(tmp_path / "c.csv"), "--out", str(tmp_path / "run"), "--method-opt", "margin=x"],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 2 and "--method-opt margin=x: expected float" in run.stderr, run.stderr


def test_logging_writes_to_the_stderr_of_the_moment_not_the_one_it_was_set_up_with(monkeypatch):
    """A caller that swaps stderr after `configure` (pytest's capture, a notebook's cell) gets compclip's warnings in the
    new stream, formatted as ever, and no "--- Logging error ---" from a handler still bound to the closed one; where
    the new one is a terminal, a warning during a progress bar is written on a line of its own above the bar."""
    import io
    import logging

    from compclip import progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    root = logging.getLogger()
    handlers, levels = root.handlers[:], (root.level, logging.getLogger("compclip").level)
    first, second = io.StringIO(), Terminal()
    monkeypatch.setattr(sys, "stderr", first)
    try:
        progress.configure()
        logging.getLogger("compclip.models").warning("said while %s", "first")
        logging.getLogger("compclip.models").info("an INFO line")
        assert first.getvalue() == "WARNING compclip.models: said while first\nINFO compclip.models: an INFO line\n"
        first.close()
        monkeypatch.setattr(sys, "stderr", second)
        logging.getLogger("compclip.models").warning("said while %s", "second")
        logging.getLogger("open_clip").info("a model build's step")  # the root's level: WARNING, as before
        said = second.getvalue()
        for step in progress.progress(range(2), "scoring", unit="batch"):
            if step == 1:
                logging.getLogger("compclip.eval").warning("during the bar")
    finally:
        root.handlers[:] = handlers
        root.setLevel(levels[0])
        logging.getLogger("compclip").setLevel(levels[1])
    assert said == "WARNING compclip.models: said while second\n"
    during = second.getvalue()[len(said):]
    assert "WARNING compclip.eval: during the bar" in re.split(r"[\r\n]", during) and "scoring: 100%" in during, repr(during)


HEAVY = "heavy = {'torch', 'open_clip', 'spacy', 'pandas'} & set(sys.modules); assert not heavy, heavy"


def test_the_command_line_imports_nothing_heavy_for_help():
    result = subprocess.run([sys.executable, "-c", f"import sys, compclip.cli; {HEAVY}"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_reading_results_loads_no_model_code():
    """`compclip report`, `compare` and `benchmarks` read result files and the benchmarks' declarations: open_clip (and
    transformers through it, 3 to 4 s a process) is loaded by commands that build a model alone."""
    code = "import sys, compclip.eval.report, compclip.eval.compare; assert 'open_clip' not in sys.modules, 'open_clip imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("listing", [["methods"], ["models"], ["models", "--ids"]])
def test_the_listing_commands_load_no_model_code(listing):
    """`compclip methods` and `compclip models` print declarations, options and whether files are cached: open_clip,
    transformers and wandb (which open_clip's and timm's imports bring, 3 s of a 6 s listing) are loaded by the
    commands that build a model alone. Run through the command line's entry point in a process of its own."""
    code = ("import sys\nfrom compclip.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as done:\n"
            "    assert not done.code, done.code\n"
            "print(sorted({'open_clip', 'transformers', 'wandb'} & set(sys.modules)), file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code, *listing], capture_output=True, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)
    assert result.returncode == 0 and result.stderr.splitlines()[-1] == "[]", result.stderr[-2000:]
    assert "siglip: no options" in result.stdout if listing == ["methods"] else "openai-clip-b32" in result.stdout


def test_a_run_that_reads_no_concepts_loads_no_spacy(tmp_path):
    """spaCy (0.4 s a process, and its memory in every DataLoader worker) is loaded by a run that reads concepts alone: a
    CLIP run on a CSV trains without it."""
    from test_train import make_dataset

    data = make_dataset(tmp_path, n=8)
    code = ("import sys\nfrom compclip.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as done:\n"
            "    assert not done.code\nassert 'spacy' not in sys.modules, 'spacy imported'")
    result = subprocess.run([sys.executable, "-c", code, "-q", "train", "--method", "clip", "--model", "compclip-tiny-clip", "--train-data",
                             data, "--out", tmp_path / "run", "--steps", "1", "--batch-size", "4", "--workers", "0", "--device", "cpu"],
                            capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "run" / "checkpoints" / "step_0000001" / "model.safetensors").is_file()


def test_a_mistyped_name_or_number_is_refused_before_torch_is_imported(tmp_path):
    """A typo costs no 10-15 s of torch's import: a method, benchmark, precision or count is checked from its declaration
    (`compclip.names`, the options' own bounds) first; the error is the one line the full check gives."""
    cases = {
        ("train", "--method", "c2clip"): "error: unknown method 'c2clip' (did you mean c2lip or occlip?); known: attswap, c2lip, ",
        ("train", "--method", "siglip+hardnge"): "error: unknown method 'hardnge' (did you mean hardneg?); known: ",
        ("train", "--method", "siglip", "--precision", "fp16x"): "error: --precision must be one of fp32, amp_bf16, amp, amp_bfloat16, ",
        ("train", "--method", "siglip", "--batch-size", "0"): "error: --batch-size must be at least 1, not 0",
        ("train", "--method", "siglip", "--eval-benchmarks", "winogrund"): "error: unknown benchmark 'winogrund' (did you mean ",
        ("eval", "--benchmark", "sugarcrepe,sugarcrep/swap_att"): "error: unknown benchmark 'sugarcrep' (did you mean sugarcrepe or ",
        ("eval", "--benchmark", "sugarcrepe", "--precision", "bf16"): "error: --precision must be one of fp32, amp_bf16, amp, not 'bf16'",
        ("eval", "--benchmark", "sugarcrepe", "--batch-size", "-1"): "error: --batch-size must be at least 1, not -1",
    }
    given = {"train": ["--model", "compclip-tiny-siglip", "--train-data", str(tmp_path / "t.csv"), "--out", str(tmp_path / "o")],
             "eval": ["--model", "compclip-tiny-siglip", "--out", str(tmp_path / "o")]}
    code = ("import contextlib, io, json, sys\nfrom compclip.cli import main\nsaid = []\n"
            f"for args in {[list(a) + given[a[0]] for a in cases]!r}:\n"
            "    err = io.StringIO()\n"
            "    with contextlib.redirect_stderr(err):\n"
            "        try:\n            main(args)\n        except SystemExit as e:\n"
            "            said.append((e.code, err.getvalue(), 'torch' in sys.modules))\n"
            "print(json.dumps(said))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr
    for (args, expected), (exit_code, err, torch_imported) in zip(cases.items(), json.loads(result.stdout), strict=True):
        assert exit_code == 2 and err.startswith(expected) and err.count("\n") == 1 and not torch_imported, (args, err, torch_imported)


def test_shell_completion_offers_method_and_benchmark_names():
    """`compclip --install-completion`'s completion, asked as bash asks it: the names of `--method`, `--benchmark` and
    `--eval-benchmarks`, the last of a `+`- or `,`-joined list after those typed."""
    def complete(*words):
        env = {**os.environ, "_COMPCLIP_COMPLETE": "complete_bash", "COMP_WORDS": " ".join(["compclip", *words]),
               "COMP_CWORD": str(len(words))}
        done = subprocess.run([sys.executable, "-m", "compclip"], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert complete("train", "--method", "c") == ["c2lip", "ceclip", "clic", "clip", "conclip"]
    assert complete("train", "--method", "c2lip+hard") == ["c2lip+hardneg"]
    assert complete("eval", "--benchmark", "sugarcrepe,w") == ["sugarcrepe,whatsup", "sugarcrepe,winoground"]
    assert complete("train", "--eval-benchmarks", "aro_v") == ["aro_vg_attribution", "aro_vg_relation"]


def test_help_shows_what_to_type_not_python_types(capsys):
    """A repeatable KEY=VALUE flag reads `KEY=VALUE`, not `<list[str]>`; an argument is named in capitals in the usage
    line, not `{input}`. (`export`'s own are its command's: another change.)"""
    for path in (["train"], ["eval"], ["concepts"], ["report"], ["compare"], ["data", "download"], ["demo"]):
        code, out, _ = run_main(capsys, *path, "--help")
        usage, options = out.split("\n", 1)[0], out.split("Options:", 1)[-1]
        assert code == 0 and not re.search(r"\{[a-z_]+\}", usage) and "<list[" not in options, (path, usage, options)
        if path == ["train"]:
            assert "--method-opt KEY=VALUE" in options


def test_the_declared_names_are_the_registries():
    """`compclip.names` declares what the registries hold: a method or benchmark shipped without its name there would be
    refused by the command line."""
    from compclip.eval.base import REGISTRY
    from compclip.methods.base import METHODS
    from compclip.names import SHIPPED_BENCHMARKS, SHIPPED_METHODS

    assert tuple(METHODS.names()) == SHIPPED_METHODS and tuple(REGISTRY.names()) == SHIPPED_BENCHMARKS


def test_export_refuses_a_taken_destination_before_loading_torch(tmp_path):
    (tmp_path / "taken.safetensors").write_text("keep me")
    code = (f"import sys\nfrom compclip.export import export\nfrom compclip.errors import UsageError\n"
            f"try:\n    export('no-checkpoint', {str(tmp_path / 'taken.safetensors')!r})\nexcept UsageError as e:\n    print(e)\n{HEAVY}")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0 and "exists: pass --force to overwrite it" in result.stdout, result.stderr


def test_methods_lists_every_method_and_its_options(capsys):
    import dataclasses

    from compclip.methods import list_methods, method_options

    code, out, _ = run_main(capsys, "methods")
    assert code == 0
    for name in list_methods():
        fields = dataclasses.fields(method_options(name))
        assert re.search(rf"^{name}( \(reads concepts: --what [a-z,-]+\))?( \(reads data fields: [a-z_, ]+; --field-key NAME=KEY\))?"
                         r"( \(trains on --image-view eval\))?(: no options)?$", out, re.M)
        assert bool(fields) != bool(re.search(rf"^{name}.*: no options$", out, re.M))
        for f in fields:
            assert f"  {f.name}={f.default}: {f.metadata['help']}" in out
    assert re.search(r"^tripletclip .*\(trains on --image-view eval\)$", out, re.M) and "siglip: no options" in out
    assert "\nnegclip (reads concepts: --what noun-phrases,pos)\n" in out and "\nsiglip: no options" in out
    assert "\ndac (reads data fields: dense_captions; --field-key NAME=KEY)\n" in out


def test_eval_precision_is_recorded_and_bf16_scores_close_to_fp32(tmp_path):
    from compclip.eval import EvalConfig, evaluate

    (tmp_path / "retrieval" / "tiny" / "images").mkdir(parents=True)
    for i, colour in enumerate([(200, 30, 30), (30, 200, 30), (30, 30, 200)]):
        Image.new("RGB", (24, 24), colour).save(tmp_path / "retrieval" / "tiny" / "images" / f"{i}.png")
    (tmp_path / "retrieval" / "tiny" / "captions.csv").write_text("image,caption\n0.png,red\n1.png,green\n2.png,blue\n")
    torch.manual_seed(0)
    model, _, _ = load_model("compclip-tiny-clip")
    save_checkpoint(model, tmp_path / "ckpt")
    runs = {p: evaluate(EvalConfig(str(tmp_path / "ckpt"), "retrieval", str(tmp_path / p), data_root=str(tmp_path), workers=0,
                               precision=p))["retrieval"]
            for p in ("fp32", "amp_bf16")}
    assert runs["fp32"]["precision"] == "fp32" and runs["amp_bf16"]["precision"] == "amp_bf16"
    assert runs["fp32"]["complete"] and runs["amp_bf16"]["complete"]
    from compclip.eval import DualEncoderScorer

    images = sorted((tmp_path / "retrieval" / "tiny" / "images").iterdir())
    model, preprocess, tokenizer = load_model(str(tmp_path / "ckpt"))
    scores = {p: DualEncoderScorer(model, preprocess, tokenizer, workers=0, precision=p).matrix(images, ["red", "green", "blue"])
              for p in ("fp32", "amp_bf16")}
    assert not torch.equal(scores["fp32"], scores["amp_bf16"])  # autocast really ran in bf16
    assert torch.allclose(scores["fp32"], scores["amp_bf16"], atol=0.05)


COMMANDS = ("version", "export", "concepts", "train", "recipes", "methods", "attention", "neighbours", "eval", "benchmarks",
            "report", "data download", "data check", "world generate", "demo")


def test_every_commands_help_opens_with_an_example_that_parses(capsys):
    """Each subcommand's --help shows an example before its options, and the example's flags are the command's own (click
    parses every flag before it acts on --help: a misspelt one in an example would exit 2)."""
    import shlex

    for command in COMMANDS:
        code, out, _ = run_main(capsys, *command.split(), "--help")
        assert code == 0, command
        options_start = re.search(r"^[A-Z][A-Za-z ]+:$", out, re.M).start()  # "Options:", or train's first group
        assert "Example:" in out[:options_start], command
        block = out.split("Example:")[1].strip().split("\n\n")[0]
        example = " ".join(line.strip().rstrip("\\") for line in block.splitlines())
        words = shlex.split(example)
        words = words[words.index("compclip") + 1:]
        assert " ".join(words[: len(command.split())]) == command, (command, example)
        code, _, err = run_main(capsys, *words, "--help")
        assert code == 0, (command, example, err)


def test_version_flag_and_shell_completion():
    import compclip as pkg

    result = compclip("--version")
    assert result.returncode == 0 and result.stdout == f"compclip {pkg.__version__}\n"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "_COMPCLIP_COMPLETE": "complete_bash"}
    for words, cword, expected in (("compclip tr", "1", "train"), ("compclip train --rec", "2", "--recipe"),
                                   ("compclip world ge", "2", "generate")):
        done = subprocess.run([sys.executable, "-m", "compclip"], capture_output=True, text=True, timeout=120,
                              env={**env, "COMP_WORDS": words, "COMP_CWORD": cword})
        assert done.returncode == 0 and expected in done.stdout.split(), (words, done.stdout, done.stderr)
    script = subprocess.run(["bash", "-c", '"$0" -m compclip --show-completion; exit $?', sys.executable], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})  # typer finds the shell it runs in: bash
    assert script.returncode == 0 and "_COMPCLIP_COMPLETE=complete_bash" in script.stdout, script.stderr


def test_train_help_is_grouped_and_every_option_has_one_group(capsys):
    import dataclasses

    from compclip.train.config import HELP_GROUPS, TrainConfig

    grouped = [name for names in HELP_GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(f.name for f in dataclasses.fields(TrainConfig))  # each once, none left out
    code, out, _ = run_main(capsys, "train", "--help")
    assert code == 0
    headings = re.findall(r"^([A-Z][a-z ]+):$", out, re.M)
    assert headings == [*HELP_GROUPS, "Other options"]
    sections = dict(zip(headings, re.split(r"^[A-Z][a-z ]+:$", out, flags=re.M)[1:], strict=True))
    assert re.findall(r"^  (--[a-z0-9-]+)", sections["Other options"], re.M) == ["--help"]
    assert "--lr <float>" in sections["Optimisation"] and "--beta2" in sections["Optimisation"]
    assert "--eval-benchmarks" in sections["Evaluation"] and "--dist-timeout" in sections["Cluster"]
    assert "--dataset-resampled / --no-dataset-resampled" in sections["Data"]


def _in_a_terminal(args: list[str], cwd) -> str:
    """What `compclip ARGS` writes to a terminal (stderr a pseudo-terminal, as a user sees it): the progress bars."""
    import fcntl
    import struct
    import termios

    main, side = os.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # a new terminal is 0 columns wide: no bar fits
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "compclip", *args], stdout=subprocess.DEVNULL, stderr=side, env=env, cwd=cwd)
    os.close(side)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the terminal's other end closed: the process is done
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    assert process.wait(timeout=300) == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    return b"".join(chunks).decode(errors="replace")


def test_progress_bars_in_a_terminal_name_what_they_count(tmp_path):
    """eval's bars name the benchmark (and split) they encode for and clear once done; concepts' bar has a total; export
    shows its stages rather than a silent minute."""
    from test_train import make_dataset

    data = make_dataset(tmp_path, n=8)
    shown = _in_a_terminal(["concepts", str(data), "--out", str(tmp_path / "store"), "--what", "noun-phrases"], tmp_path)
    assert re.search(r"concepts: 100%\|[^|]*\| 8/8", shown), shown[-2000:]
    (tmp_path / "root" / "retrieval").mkdir(parents=True)
    (tmp_path / "root" / "retrieval" / "set").symlink_to(tmp_path)
    (tmp_path / "captions.csv").write_text(data.read_text())
    shown = _in_a_terminal(["eval", "--model", "compclip-tiny-clip", "--benchmark", "retrieval", "--data-root", str(tmp_path / "root"),
                            "--workers", "0", "--out", str(tmp_path / "results")], tmp_path)
    assert "retrieval/set: images" in shown and "retrieval/set: texts" in shown, shown[-2000:]  # the benchmark and its dataset
    model, _, _ = load_model("compclip-tiny-clip")
    save_checkpoint(model, tmp_path / "ckpt")
    shown = _in_a_terminal(["export", str(tmp_path / "ckpt"), str(tmp_path / "exported")], tmp_path)
    assert re.search(r"export open_clip \(load, convert and check, card\): 100%\|[^|]*\| 3/3", shown), shown[-2000:]


def test_data_check_reports_a_damaged_annotation_file_and_goes_on(tmp_path, capsys):
    """A damaged annotation file of one benchmark is that benchmark's line, naming the file; the check goes on to the
    benchmarks after it and exits 1, where it used to stop at the first such file."""
    from conftest import SHARED

    shutil.copytree(SHARED / "data" / "sugarcrepe", tmp_path / "sugarcrepe")
    (tmp_path / "sugarcrepe" / "add_att.json").write_text("{bad")
    code, out, err = run_main(capsys, "data", "check", "--data-root", tmp_path)
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    assert code == 1, err
    assert lines["sugarcrepe"].startswith(f"unusable: {tmp_path / 'sugarcrepe' / 'add_att.json'}: unreadable JSON")
    assert "looked for" in lines["winoground"] and "looked for" in lines["zeroshot"]  # the benchmarks after it still listed
GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide.md"


def listed(help_text: str) -> list[str]:
    """The names under `Commands:` in a group's `--help`."""
    section = help_text.split("Commands:\n", 1)[1]
    return [line.split()[0] for line in section.splitlines() if line.startswith("  ") and line.split()]


def test_the_guide_names_every_benchmark_and_every_command():
    """docs/guide.md names each benchmark `compclip benchmarks` lists (as its `--benchmark` name), each command of
    `compclip --help` in its command-line reference, and each subcommand of a group (`compclip data download`)."""
    from typer.testing import CliRunner

    from compclip.cli import app

    def output(*args: str) -> str:  # the app as `compclip ARGS` runs it, in this process: no start-up per command
        return CliRunner().invoke(app, list(args), env={"HF_HUB_OFFLINE": "1", "COLUMNS": "200"}).output

    guide = GUIDE.read_text(encoding="utf-8")
    reference = guide.split("## Command line\n", 1)[1].split("\n## ", 1)[0]
    benchmarks = [line.split()[0] for line in output("benchmarks").splitlines() if line and not line[0].isspace()]
    commands = listed(output("--help"))
    groups = sorted(group.name for group in app.registered_groups)
    subcommands = [f"{group} {sub}" for group in groups for sub in listed(output(group, "--help"))]
    assert len(benchmarks) >= 20 and {"valse", "eqben", "recipes", "data download"} <= {*benchmarks, *commands, *subcommands}
    assert not [b for b in benchmarks if f"`{b}`" not in guide], "benchmarks the guide does not name"
    assert not [c for c in commands if f"compclip {c}" not in reference], "commands the guide's command-line reference omits"
    assert not [c for c in subcommands if f"compclip {c}" not in guide], "subcommands the guide does not name"


def test_data_download_help_names_every_benchmark_with_a_public_download():
    """`compclip data download --help` names every benchmark whose module declares public files to fetch (`assets`), and
    the COCO files several benchmarks share."""
    from compclip.eval import REGISTRY
    from compclip.eval.download import COCO

    declared = [name for name, bench in REGISTRY.items() if bench.assets] + list(COCO)
    said = " ".join(compclip("data", "download", "--help").stdout.split())
    assert {"valse", "imagecode", "sugarcrepe"} <= set(declared)
    assert not [name for name in declared if not re.search(rf"(?<![\w-]){name}(?![\w-])", said)], said


def test_each_benchmark_with_a_download_says_so_in_its_data_line():
    """`compclip benchmarks`: the data line of each benchmark whose module declares public files names the command that
    fetches them, where a user reads where the files go."""
    from typer.testing import CliRunner

    from compclip.cli import app
    from compclip.eval import REGISTRY

    lines = CliRunner().invoke(app, ["benchmarks"], env={"HF_HUB_OFFLINE": "1"}).output.splitlines()
    data = {name: lines[lines.index(head) + 1] for name in REGISTRY.names() for head in lines if head.split(" ")[0] == name}
    fetched = [name for name, bench in REGISTRY.items() if bench.assets]
    assert {"valse", "imagecode"} <= set(fetched)
    assert not [name for name in fetched if f"`compclip data download {name}`" not in data[name]], data


def test_data_check_names_a_retrieval_image_missing_and_calls_no_unlisted_set_ready(tmp_path, capsys):
    """A retrieval set whose captions.csv names an image that is not there is counted missing, naming it; a zero-shot
    set, whose images are not listed ahead, is not called ready (its files are there, nothing more was checked)."""
    from test_zeroshot_layouts import picture, write_wds

    folder = tmp_path / "retrieval" / "set"
    folder.mkdir(parents=True)
    for k in range(3):
        picture(k).save(folder / f"{k}.png")
    (folder / "captions.csv").write_text("image,caption\n0.png,a red thing\n1.png,a blue thing\n2.png,a green thing\n3.png,a grey thing\n")
    write_wds(tmp_path / "zeroshot" / "wds_cifar10", count=4, per_shard=4)
    code, out, err = run_main(capsys, "data", "check", "--data-root", tmp_path)
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    assert code in (0, None), err
    assert lines["retrieval"] == "1 images missing, e.g. retrieval/set/3.png", out
    assert lines["zeroshot"] != "ready" and "not listed" in lines["zeroshot"], out
