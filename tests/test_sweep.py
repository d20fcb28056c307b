"""Many models, one command (`compclip eval --model a,b,c`): each model's results in its own folder equal to that model
scored alone, a finished model skipped when the sweep runs again, the list split into parts as a SLURM array splits it."""
from __future__ import annotations

import json
import logging
import os

import pandas as pd
import pytest
from PIL import Image

from compclip.eval.sweep import folder_name
from conftest import opened, run_main

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
    assert f"{MODELS[0]}: sugarcrepe/swap_att: whole in {tmp_path / 'sweep' / MODELS[0] / 'sugarcrepe-swap_att.json'}: skipped" in err
    assert (tmp_path / "sweep" / MODELS[0] / "sugarcrepe-swap_att.json").stat().st_mtime_ns == written[MODELS[0]]
    assert metrics(tmp_path / "sweep" / MODELS[1]) == metrics(tmp_path / "alone" / MODELS[1])
    assert f"{MODELS[0]}: sugarcrepe/swap_att: " not in said and f"  {MODELS[0]}    skipped  sugarcrepe/swap_att: whole in" in said
    first = tmp_path / "sweep" / MODELS[0] / "sugarcrepe-swap_att.json"  # a result marked incomplete, naming nothing it lacks
    first.write_text(json.dumps({**json.loads(first.read_text()), "complete": False}))
    code, said, err = evaluate(capsys, root, tmp_path / "sweep", "--model", ",".join(MODELS[:2]))
    assert code == 0 and f"{MODELS[0]}: sugarcrepe/swap_att: " in said and f"{MODELS[1]}: sugarcrepe/swap_att: whole in" in err, err
    assert f"{MODELS[0]}: sugarcrepe/swap_att: incomplete in {first}, and it does not say what it lacks: scored again" in err
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


@pytest.fixture
def five(tmp_path):
    """Five SugarCrepe swap-att items, the fourth's image a file that does not decode."""
    (tmp_path / "data" / "coco" / "val2017").mkdir(parents=True)
    (tmp_path / "data" / "sugarcrepe").mkdir()
    records = {}
    for k in range(5):
        name = f"{k + 1:012d}.jpg"
        if k == 3:
            (tmp_path / "data" / "coco" / "val2017" / name).write_bytes(b"\xff\xd8 not a JPEG")
        else:
            Image.new("RGB", (48 + 8 * k, 40), (50 * k, 120, 200 - 40 * k)).save(tmp_path / "data" / "coco" / "val2017" / name)
        records[str(k)] = {"filename": name, "caption": f"a red cup beside {k} blue plates",
                           "negative_caption": f"a blue cup beside {k} red plates"}
    (tmp_path / "data" / "sugarcrepe" / "swap_att.json").write_text(json.dumps(records))
    return tmp_path / "data"


def checkpoint(folder, **how):
    """compclip-tiny-clip saved as a checkpoint folder: other weights (`init_seed`) or another image size."""
    from compclip.models import load_model
    from compclip.models.checkpoint import save_checkpoint

    return save_checkpoint(load_model("compclip-tiny-clip", **how)[0], folder)


def image_opens(files: list[str], root) -> dict[str, int]:
    images = root / "coco" / "val2017"
    return {name: sum(os.path.realpath(f) == os.path.realpath(images / name) for f in files) for name in sorted(os.listdir(images))}


def scores(folder):
    items = pd.read_parquet(folder / "sugarcrepe-swap_att.items.parquet")
    return items[["item", "image", "score_true", "score_false", "correct"]].to_dict("records")


@pytest.mark.parametrize("where", ["memory", "disk"])
def test_models_of_one_preprocessing_decode_each_image_once_and_score_as_alone(tmp_path, five, capsys, caplog, where):
    """compclip-tiny-clip and the same architecture's other weights in a checkpoint folder (its preprocessing read back
    from JSON, lists where the other has tuples: the same parameters): every image file is opened by the first model
    alone, the undecodable one too, and each model's per-item scores are its own run's to the bit, the decoded images
    kept in memory or (none fitting there) in a scratch folder under --out that is gone when the sweep ends."""
    from compclip.eval.config import EvalConfig
    from compclip.eval.sweep import sweep

    other = checkpoint(tmp_path / "seed1", init_seed=1)
    models = ("compclip-tiny-clip", str(other))
    args = ("--benchmark", "sugarcrepe/swap_att", "--data-root", five, "--workers", "0", "--batch-size", "2")
    with opened() as files, caplog.at_level(logging.INFO, logger="compclip.eval"):
        if where == "memory":  # the command as a user runs it, its log on stderr
            code, _, said = run_main(capsys, "eval", "--model", ",".join(models), "--out", tmp_path / "sweep", *args)
            assert code == 0, said
        else:  # the library's sweep, with no memory for the images
            sweep(EvalConfig(model=",".join(models), benchmark="sugarcrepe/swap_att", data_root=str(five), workers=0,
                             batch_size=2, out=str(tmp_path / "sweep")), memory_bytes=0)
            said = caplog.text
    assert image_opens(files, five) == {f"{k:012d}.jpg": 1 for k in range(1, 6)}
    image = 3 * 64 * 64 * 4  # bytes of one image: 3 channels of float32 at compclip-tiny-clip's 64 x 64
    kept = (f"4 in memory ({4 * image:,} bytes, at most {2 << 30:,}), 0 on disk (0 bytes)" if where == "memory"
            else f"0 in memory (0 bytes, at most 0), 4 on disk ({4 * image:,} bytes)")
    assert f"decoded images kept for the sweep's models: {kept}, 1 that do not decode" in said
    assert "decoded 0 images, took 5 more as the sweep's models of the same preprocessing decoded them" in said
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir()) == sorted(folder_name(m) for m in models)
    for model in models:
        code, _, err = run_main(capsys, "-q", "eval", "--model", model, "--out", tmp_path / "alone" / folder_name(model), *args)
        assert code == 0, err
        alone, swept = tmp_path / "alone" / folder_name(model), tmp_path / "sweep" / folder_name(model)
        assert scores(swept) == scores(alone) and len(scores(alone)) == 4
        assert metrics(swept) == metrics(alone) and metrics(swept)["swap_att"]["n_missing"] == 1


def test_models_of_two_image_sizes_each_decode_their_own(tmp_path, five, capsys):
    """compclip-tiny-clip at 64 px, at 32 px, and at 64 px with other weights: the 32 px model decodes every image
    itself and scores as alone, the second 64 px model (after it) takes the first's: each image opened twice."""
    small, other = checkpoint(tmp_path / "small", force_image_size=32), checkpoint(tmp_path / "seed1", init_seed=1)
    args = ("--benchmark", "sugarcrepe/swap_att", "--data-root", five, "--workers", "0", "--batch-size", "2")
    with opened() as files:
        code, _, err = run_main(capsys, "-q", "eval", "--model", f"compclip-tiny-clip,{small},{other}", "--out", tmp_path / "sweep", *args)
    assert code == 0, err
    assert image_opens(files, five) == {f"{k:012d}.jpg": 2 for k in range(1, 6)}
    code, _, err = run_main(capsys, "-q", "eval", "--model", str(small), "--out", tmp_path / "alone", *args)
    assert code == 0, err
    assert scores(tmp_path / "sweep" / folder_name(str(small))) == scores(tmp_path / "alone")


def preprocessed_otherwise(folder, **preprocess_cfg):
    """compclip-tiny-clip's own weights saved as a checkpoint folder whose open_clip preprocessing differs in the
    `preprocess_cfg` given (a checkpoint trained or exported with another normalisation or resize), nothing else."""
    config = checkpoint(folder)
    for name in ("open_clip_config.json", "config.json"):
        written = json.loads((config / name).read_text())
        written["preprocess_cfg"] = {**written["preprocess_cfg"], **preprocess_cfg}
        (config / name).write_text(json.dumps(written))
    return config


@pytest.fixture
def textured(tmp_path):
    """Four SugarCrepe swap-att items on seeded noise images, each wider than high: where a resize mode (crop or squash)
    or an interpolation differs, the pixels do, which a plain colour would hide."""
    import numpy as np

    (tmp_path / "data" / "coco" / "val2017").mkdir(parents=True)
    (tmp_path / "data" / "sugarcrepe").mkdir()
    rng, records = np.random.default_rng(0), {}
    for k in range(4):
        name = f"{k + 1:012d}.jpg"
        Image.fromarray(rng.integers(0, 256, (40, 72 + 8 * k, 3), dtype=np.uint8)).save(tmp_path / "data" / "coco" / "val2017" / name)
        records[str(k)] = {"filename": name, "caption": f"a red cup beside {k} blue plates",
                           "negative_caption": f"a blue cup beside {k} red plates"}
    (tmp_path / "data" / "sugarcrepe" / "swap_att.json").write_text(json.dumps(records))
    return tmp_path / "data"


def test_models_whose_preprocessing_differs_in_one_parameter_each_decode_their_own(tmp_path, textured, capsys):
    """The same weights four times, preprocessed otherwise in the mean alone, the std alone, the resize mode alone
    (squash where open_clip's default keeps the aspect and crops) and the interpolation alone: were the decoded images
    shared across any of them, a model would score the first's pixels. Each model's per-item scores in the sweep are its
    own run's, and every image is opened by each model (five models, five opens); each parameter moves the scores, so a
    model scored on another's pixels would show."""
    from compclip.models import load_model

    assert load_model("compclip-tiny-clip")[0].visual.preprocess_cfg["resize_mode"] == "shortest"  # the default, replaced below
    otherwise = {"mean": {"mean": [0.5, 0.5, 0.5]}, "std": {"std": [0.5, 0.5, 0.5]}, "resize_mode": {"resize_mode": "squash"},
                 "interpolation": {"interpolation": "bilinear"}}
    models = {what: str(preprocessed_otherwise(tmp_path / what, **cfg)) for what, cfg in otherwise.items()}
    args = ("--benchmark", "sugarcrepe/swap_att", "--data-root", textured, "--workers", "0", "--batch-size", "2")
    with opened() as files:
        code, _, err = run_main(capsys, "-q", "eval", "--model", ",".join(["compclip-tiny-clip", *models.values()]),
                                "--out", tmp_path / "sweep", *args)
    assert code == 0, err
    assert image_opens(files, textured) == {f"{k:012d}.jpg": 5 for k in range(1, 5)}
    alone = {}
    for what, model in models.items():
        code, _, err = run_main(capsys, "-q", "eval", "--model", model, "--out", tmp_path / "alone" / what, *args)
        assert code == 0, err
        alone[what] = scores(tmp_path / "alone" / what)
        assert scores(tmp_path / "sweep" / folder_name(model)) == alone[what], what
    base = scores(tmp_path / "sweep" / "compclip-tiny-clip")
    assert [what for what in models if alone[what] == base] == []


def test_a_sweep_keeps_in_memory_no_more_bytes_than_its_bound(tmp_path, five, caplog):
    """`sweep(memory_bytes=)` bounds the decoded images kept in memory: at a bound of two images' bytes (3 channels of
    float32 at the model's 64 x 64, counted here from its size), two of the four images that decode stay in memory and
    the other two go to disk, and each model scores as alone."""
    from compclip.eval.config import EvalConfig
    from compclip.eval.sweep import sweep
    from compclip.models import load_model

    height, width = load_model("compclip-tiny-clip")[0].visual.preprocess_cfg["size"]
    image = 3 * height * width * 4
    other = checkpoint(tmp_path / "seed1", init_seed=1)
    with caplog.at_level(logging.INFO, logger="compclip.eval"):
        done = sweep(EvalConfig(model=f"compclip-tiny-clip,{other}", benchmark="sugarcrepe/swap_att", data_root=str(five), workers=0,
                                batch_size=2, out=str(tmp_path / "sweep")), memory_bytes=2 * image).scored
    assert (f"decoded images kept for the sweep's models: 2 in memory ({2 * image:,} bytes, at most {2 * image:,}), 2 on disk "
            f"({2 * image:,} bytes), 1 that do not decode") in caplog.text
    assert "decoded 0 images, took 5 more as the sweep's models of the same preprocessing decoded them" in caplog.text
    assert list(done) == ["compclip-tiny-clip", str(other)] and not (tmp_path / "sweep" / "pixels").exists()
    for model in done:
        alone = sweep(EvalConfig(model=model, benchmark="sugarcrepe/swap_att", data_root=str(five), workers=0, batch_size=2,
                                 out=str(tmp_path / "alone")), memory_bytes=0).scored
        assert done[model]["sugarcrepe/swap_att"]["metrics"] == alone[model]["sugarcrepe/swap_att"]["metrics"]
