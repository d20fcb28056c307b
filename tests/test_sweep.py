"""Many models, one command (`compclip eval --model a,b,c`): each model's results in its own folder equal to that model
scored alone, a finished model skipped when the sweep runs again, the list split into parts as a SLURM array splits it."""
from __future__ import annotations

import json

import pytest
from PIL import Image

from conftest import run_main

MODELS = ("compclip-tiny-clip", "compclip-tiny-siglip", "compclip-tiny-world")


@pytest.fixture
def root(tmp_path):
    """Three SugarCrepe swap-att items on generated images under their COCO names."""
    (tmp_path / "data" / "coco" / "val2017").mkdir(parents=True)
    (tmp_path / "data" / "sugarcrepe").mkdir()
    records = {}
    for k, (colour, other) in enumerate([("red", "blue"), ("green", "white"), ("yellow", "black")]):
        name = f"{k + 1:012d}.jpg"
        Image.new("RGB", (48, 40), ((60 * k) % 256, 120, 200 - 50 * k)).save(tmp_path / "data" / "coco" / "val2017" / name)
        records[str(k)] = {"filename": name, "caption": f"a {colour} cup on a {other} table",
                           "negative_caption": f"a {other} cup on a {colour} table"}
    (tmp_path / "data" / "sugarcrepe" / "swap_att.json").write_text(json.dumps(records))
    return tmp_path / "data"


def evaluate(capsys, root, out, *args):
    return run_main(capsys, "-q", "eval", "--benchmark", "sugarcrepe/swap_att", "--data-root", root, "--workers", "0", "--out", out, *args)


def metrics(folder):
    return json.loads((folder / "sugarcrepe-swap_att.json").read_text())["metrics"]


def test_each_model_into_its_folder_as_alone_and_a_finished_one_skipped(tmp_path, root, capsys):
    code, said, err = evaluate(capsys, root, tmp_path / "sweep", "--model", ",".join(MODELS[:2]))
    assert code == 0, err
    for model in MODELS[:2]:
        assert evaluate(capsys, root, tmp_path / "alone" / model, "--model", model)[0] == 0
        assert metrics(tmp_path / "sweep" / model) == metrics(tmp_path / "alone" / model)
        assert f"{model}: sugarcrepe/swap_att: " in said
    written = {m: (tmp_path / "sweep" / m / "sugarcrepe-swap_att.json").stat().st_mtime_ns for m in MODELS[:2]}
    (tmp_path / "sweep" / MODELS[1] / "sugarcrepe-swap_att.json").unlink()  # a sweep stopped before its second model's result
    code, said, err = evaluate(capsys, root, tmp_path / "sweep", "--model", ",".join(MODELS[:2]))
    assert code == 0, err
    assert f"{MODELS[0]}: every benchmark's result is in {tmp_path / 'sweep' / MODELS[0]} already: skipped" in err
    assert (tmp_path / "sweep" / MODELS[0] / "sugarcrepe-swap_att.json").stat().st_mtime_ns == written[MODELS[0]]
    assert metrics(tmp_path / "sweep" / MODELS[1]) == metrics(tmp_path / "alone" / MODELS[1]) and MODELS[0] not in said
    first = tmp_path / "sweep" / MODELS[0] / "sugarcrepe-swap_att.json"  # a result marked incomplete (images were missing)
    first.write_text(json.dumps({**json.loads(first.read_text()), "complete": False}))
    code, said, err = evaluate(capsys, root, tmp_path / "sweep", "--model", ",".join(MODELS[:2]))
    assert code == 0 and f"{MODELS[0]}: sugarcrepe/swap_att: " in said and f"{MODELS[1]}: every benchmark's result" in err, err
    assert json.loads(first.read_text())["complete"]
    code, _, err = run_main(capsys, "-q", "report", *(tmp_path / "sweep" / m for m in MODELS[:2]), "--out", tmp_path / "report")
    assert code == 0, err


def test_a_list_file_splits_into_parts_as_a_slurm_array_does(tmp_path, root, capsys, monkeypatch):
    """A .txt file of names (a comment, a blank line); task 1 of an array of 2 scores the second model only (k mod 2 = 1),
    `--part 0/2` the first and third."""
    listed = tmp_path / "models.txt"
    listed.write_text(f"# the sweep\n{MODELS[0]}\n\n{MODELS[1]}  # the SigLIP\n{MODELS[2]}\n")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")
    code, _, err = evaluate(capsys, root, tmp_path / "array", "--model", listed)
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "array").iterdir()) == [MODELS[1]]
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    monkeypatch.delenv("SLURM_ARRAY_TASK_COUNT")
    code, _, err = evaluate(capsys, root, tmp_path / "parts", "--model", listed, "--part", "0/2")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "parts").iterdir()) == [MODELS[0], MODELS[2]]


@pytest.mark.parametrize("models, extra, said", [
    ("compclip-tiny-clip,compclip-tiny-clip", (), "error: --model: compclip-tiny-clip is named twice"),
    ("a/b,a:b", (), "error: --model: a/b and a:b would share the results folder"),
    ("compclip-tiny-clip,compclip-tiny-siglip", ("--pretrained", "x.pt"),
     "error: --pretrained names one model's weights, and --model names 2"),
    ("compclip-tiny-clip,compclip-tiny-siglip", ("--part", "2/2"), "error: --part 2/2: i must be in 0..1"),
])
def test_a_sweep_that_cannot_run_is_one_line_before_any_model_loads(tmp_path, root, capsys, models, extra, said):
    code, _, err = evaluate(capsys, root, tmp_path / "out", "--model", models, *extra)
    assert code == 2 and err.startswith(said) and len(err.strip().splitlines()) == 1, err
    assert not any((tmp_path / "out").glob("*/*.json"))
