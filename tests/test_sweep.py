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


STAND_IN_ID = "clic-laion-b32"  # an `hf-hub:` registry entry: its repository planted with compclip-tiny-clip's config


def plant_stand_in(hub):
    """The registry entry's Hub repository where huggingface_hub keeps it, as open_clip's push_to_hf_hub writes one, holding
    compclip-tiny-clip (seeded weights) in place of its ViT-B/32: the id loads through its real route, offline, in a blink."""
    import open_clip
    from safetensors.torch import save_file

    from compclip.models import load_model
    from compclip.models.released import get_released
    from conftest import plant_hub_repo

    model = load_model("compclip-tiny-clip", init_seed=2)[0]
    config = {"model_cfg": open_clip.get_model_config("compclip-tiny-clip"),
              "preprocess_cfg": {"mean": list(open_clip.OPENAI_DATASET_MEAN), "std": list(open_clip.OPENAI_DATASET_STD)}}
    plant_hub_repo(hub, get_released(STAND_IN_ID).model.removeprefix("hf-hub:"), {
        "open_clip_config.json": json.dumps(config).encode(),
        "open_clip_model.safetensors": lambda s: save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                                                           str(s / "open_clip_model.safetensors"))})


def run_folder(folder):
    """A training run's folder whose checkpoints/latest names its one step."""
    checkpoint(folder / "checkpoints" / "step_3", init_seed=3)
    (folder / "checkpoints" / "latest").write_text("step_3\n")
    return folder


ABSENT = ("openai-clip-b32", "dac-sam-b32")  # an open_clip tag with nothing cached, a file downloaded by hand that is not there


@pytest.fixture
def listed(tmp_path, hub_cache):
    """A list file of eight models: three bundled, a checkpoint folder, a run folder, the stand-in registry id, and the two
    registry ids whose weights are absent, among them."""
    plant_stand_in(hub_cache)
    models = ["compclip-tiny-clip", ABSENT[0], "compclip-tiny-siglip", str(checkpoint(tmp_path / "seed1", init_seed=1)),
              STAND_IN_ID, str(run_folder(tmp_path / "run")), ABSENT[1], "compclip-tiny-world"]
    (tmp_path / "models.txt").write_text("".join(f"{m}\n" for m in models))
    return tmp_path / "models.txt", models


def scored_lines(said, models):
    """The models whose score line a sweep printed."""
    return [m for m in models if f"{m}: sugarcrepe/swap_att: swap " in said]


def results(out, models):
    """Each model's result and items file, with its modification time in ns."""
    return {m: {f.name: f.stat().st_mtime_ns for f in (out / folder_name(m)).glob("sugarcrepe-swap_att.*")} for m in models}


def test_a_list_scores_every_model_it_can_names_each_absent_one_and_a_rerun_finishes_what_a_kill_left(tmp_path, root, listed, capsys):
    """Eight models of every kind a list can name: each loadable one scored, each with weights absent one `error` line naming
    it and why, the summary table after, exit 1; the same command again keeps every whole result (files not rewritten), and
    after a kill in the middle of a model (its items written, its result not; another's result cut short, a third's items
    gone) scores those three again and keeps the others."""
    listing, models = listed
    loadable = [m for m in models if m not in ABSENT]
    out = tmp_path / "sweep"
    code, said, err = evaluate(capsys, root, out, "--model", listing)
    assert code == 1, err
    assert scored_lines(said, models) == loadable, said
    for model in ABSENT:
        lines = [line for line in err.splitlines() if model in line]
        assert len(lines) == 1 and lines[0].startswith(f"ERROR compclip.eval: {model}: not scored: "), err
        assert not (out / model).exists()
    assert "sweep of 8 models: 6 scored, 0 skipped, 2 failed" in said
    table = said[said.index("sweep of 8 models"):].splitlines()[1:]
    assert [line.split()[:2] for line in table] == [[m, "failed" if m in ABSENT else "scored"] for m in models]
    for model in loadable:
        record = json.loads((out / folder_name(model) / "sugarcrepe-swap_att.json").read_text())
        assert record["complete"] and len(scores(out / folder_name(model))) == 3
    first = results(out, loadable)

    code, said, err = evaluate(capsys, root, out, "--model", listing)
    assert code == 1 and scored_lines(said, models) == [], err
    assert "sweep of 8 models: 0 scored, 6 skipped, 2 failed" in said
    assert results(out, loadable) == first

    killed, cut = out / folder_name(loadable[3]), out / folder_name(loadable[4])
    (killed / "sugarcrepe-swap_att.json").unlink()  # killed between its items and its result
    text = (cut / "sugarcrepe-swap_att.json").read_text()
    (cut / "sugarcrepe-swap_att.json").write_text(text[: len(text) // 2])
    (out / folder_name(loadable[5]) / "sugarcrepe-swap_att.items.parquet").unlink()  # a result whose items are gone
    code, said, err = evaluate(capsys, root, out, "--model", listing)
    assert code == 1 and scored_lines(said, models) == loadable[3:], err
    again = results(out, loadable)
    assert {m: again[m] for m in loadable[:3]} == {m: first[m] for m in loadable[:3]}
    for model in loadable:
        assert json.loads((out / folder_name(model) / "sugarcrepe-swap_att.json").read_text())["complete"]
        assert len(scores(out / folder_name(model))) == 3


ARRAYS = {  # each array's tasks' SLURM variables: --array=0-6:2 (a step), --array=3-9:3%1 (an offset and a limit)
    "0-6:2": [{"SLURM_ARRAY_TASK_ID": str(t), "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "6", "SLURM_ARRAY_TASK_STEP": "2",
               "SLURM_ARRAY_TASK_COUNT": "4"} for t in (0, 2, 4, 6)],
    "3-9:3%1": [{"SLURM_ARRAY_TASK_ID": str(t), "SLURM_ARRAY_TASK_MIN": "3", "SLURM_ARRAY_TASK_MAX": "9", "SLURM_ARRAY_TASK_STEP": "3",
                 "SLURM_ARRAY_TASK_COUNT": "3"} for t in (3, 6, 9)],
    "torchrun 2": [{"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r)} for r in (0, 1)],
}


@pytest.mark.parametrize("layout", ["0-6:2", "torchrun 2"])
def test_each_array_task_or_torchrun_rank_scores_its_share_and_together_every_model_once(tmp_path, root, listed, capsys, monkeypatch,
                                                                                         layout):
    """Each task of a stepped SLURM array (or rank of torchrun), run with its own variables into one --out: every model
    of the list is scored, or named as failed, by exactly one task, and each task prints its part's summary."""
    listing, models = listed
    seen = []
    for task, env in enumerate(ARRAYS[layout]):
        with monkeypatch.context() as m:
            for key, value in env.items():
                m.setenv(key, value)
            code, said, err = evaluate(capsys, root, tmp_path / "out", "--model", listing)
        mine = [x for k, x in enumerate(models) if k % len(ARRAYS[layout]) == task]
        assert code == (1 if set(mine) & set(ABSENT) else 0), err
        assert f"sweep of {len(mine)} models (part {task}/{len(ARRAYS[layout])} of 8)" in said
        seen += scored_lines(said, models) + [x for x in ABSENT if f"{x}: not scored" in err]
    assert sorted(seen) == sorted(models)


@pytest.mark.parametrize("env, place", [(ARRAYS["0-6:2"][2], (2, 4)), (ARRAYS["3-9:3%1"][1], (1, 3)), (ARRAYS["3-9:3%1"][2], (2, 3))])
def test_a_slurm_array_task_takes_its_place_for_any_step_and_offset(env, place):
    from compclip.concepts import parse_part

    assert parse_part(None, env) == place


@pytest.mark.parametrize("env, said", [
    ({"SLURM_ARRAY_TASK_ID": "10", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "10", "SLURM_ARRAY_TASK_STEP": "1",
      "SLURM_ARRAY_TASK_COUNT": "3"}, "error: SLURM array task 10 of ids 1-10:1, 3 tasks: its ids are no evenly stepped range"),
    ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "6", "SLURM_ARRAY_TASK_STEP": "2",
      "SLURM_ARRAY_TASK_COUNT": "4"}, "error: SLURM array task 3 of ids 0-6:2, 4 tasks: task 3 is not one of the array's ids"),
])
def test_an_array_whose_place_cannot_be_read_is_one_line(tmp_path, root, capsys, monkeypatch, env, said):
    """`--array=1,3,10` (no even step), or a task id off the array's step: refused before any model, never a part that
    scores some models twice and others never."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    code, _, err = evaluate(capsys, root, tmp_path / "out", "--model", ",".join(MODELS))
    assert code == 2 and err.startswith(said) and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_a_mistyped_id_in_a_list_is_one_line_with_the_registrys_suggestion_before_any_model_is_scored(tmp_path, root, capsys):
    listing = tmp_path / "models.txt"
    listing.write_text("compclip-tiny-clip\ncompclip-tiny-siglip\nnegclip-b23\ncompclip-tiny-world\n")
    code, said, err = evaluate(capsys, root, tmp_path / "out", "--model", listing)
    assert code == 2 and said == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {listing} line 3: unknown model 'negclip-b23' (did you mean negclip-b32 or "), err
    assert not (tmp_path / "out").exists()


def test_a_failing_model_stops_the_list_under_fail_fast(tmp_path, root, capsys):
    code, _, err = evaluate(capsys, root, tmp_path / "out", "--model", f"compclip-tiny-clip,{ABSENT[1]},compclip-tiny-siglip",
                               "--fail-fast")
    assert code == 2 and err.startswith(f"error: {ABSENT[1]}: ") and len(err.strip().splitlines()) == 1, err
    assert json.loads((tmp_path / "out" / "compclip-tiny-clip" / "sugarcrepe-swap_att.json").read_text())["complete"]
    assert not (tmp_path / "out" / "compclip-tiny-siglip").exists()


def test_an_incomplete_result_is_scored_again_only_once_its_missing_images_are_there(tmp_path, five, capsys):
    """The fourth image does not decode and the fifth is gone (a dead link): the result is incomplete; the same command
    again keeps it, saying why, until both images are there, and then scores it whole."""
    images = five / "coco" / "val2017"
    (images / "000000000005.jpg").rename(tmp_path / "kept.jpg")
    out = tmp_path / "out"
    code, said, err = evaluate(capsys, five, out, "--model", ",".join(MODELS[:2]))
    assert code == 0 and "(incomplete)" in said, err
    file = out / MODELS[0] / "sugarcrepe-swap_att.json"
    written = file.stat().st_mtime_ns
    code, said, err = evaluate(capsys, five, out, "--model", ",".join(MODELS[:2]))
    assert code == 0 and scored_lines(said, MODELS) == [], err
    assert (f"{MODELS[0]}: sugarcrepe/swap_att: incomplete in {file}, and none of what it lacks has appeared since (2 images missing): "
            "kept: skipped") in err
    assert file.stat().st_mtime_ns == written
    (tmp_path / "kept.jpg").rename(images / "000000000005.jpg")
    code, said, err = evaluate(capsys, five, out, "--model", ",".join(MODELS[:2]))
    assert code == 0 and scored_lines(said, MODELS) == list(MODELS[:2]), err
    assert f"{MODELS[0]}: sugarcrepe/swap_att: incomplete in {file}, and 1 of its 2 missing images are there now: scored again" in err
    assert json.loads(file.read_text())["metrics"]["swap_att"]["n_missing"] == 1
