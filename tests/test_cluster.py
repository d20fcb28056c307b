"""What a shared cluster does to a run: group-shared folders under a umask, checkpoint rotation beside the user's own
files. Each case asserts what is on disk afterwards."""
import contextlib
import os
import stat

import pytest

from compclip.io import atomic_dir, atomic_path, write_json


@contextlib.contextmanager
def umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_written_files_and_folders_honour_the_umask_as_open_would(tmp_path, mask):
    """A result, a checkpoint and an export under umask 022 are readable by the group (0644, folders 0755); under 002
    writable by it too; under 077 private. Compared with what `open()` and `mkdir()` give in the same folder."""
    from compclip.export import export
    from compclip.models import load_model, save_checkpoint

    with umask(mask):
        write_json(tmp_path / "result.json", {"a": 1})
        with atomic_path(tmp_path / "report.md") as tmp:
            tmp.write_text("x")
        with atomic_dir(tmp_path / "folder") as tmp:
            (tmp / "inside.txt").write_text("y")
        model, _, _ = load_model("compclip-tiny-clip")
        save_checkpoint(model, tmp_path / "ckpt", state={"step": 1})
        export(tmp_path / "ckpt", str(tmp_path / "export"), "open_clip")
        (tmp_path / "plain.txt").write_text("z")
        (tmp_path / "plain").mkdir()
    file_mode, folder_mode = mode(tmp_path / "plain.txt"), mode(tmp_path / "plain")
    assert file_mode == 0o666 & ~mask and folder_mode == 0o777 & ~mask
    written = [*(tmp_path / "ckpt").iterdir(), *(tmp_path / "export").iterdir()]
    for path in (tmp_path / "result.json", tmp_path / "report.md", tmp_path / "folder" / "inside.txt", *written):
        assert mode(path) == file_mode, path
    for path in (tmp_path / "folder", tmp_path / "ckpt", tmp_path / "export"):
        assert mode(path) == folder_mode, path


def test_checkpoint_rotation_removes_only_what_the_trainer_wrote(tmp_path, caplog):
    """An export and a results file a user put inside an old step folder outlive `--keep`: the checkpoint's own files
    go, the folder stays with theirs (said once), and a folder holding nothing else goes whole."""
    import logging

    from compclip.models.checkpoint import CONFIG_NAME
    from compclip.train import train
    from test_train import settings_config

    train(settings_config(tmp_path, "run", steps=2, save_every=2, keep=2, schedule="const"))
    old = tmp_path / "run" / "checkpoints" / "step_0000002"
    (old / "hf").mkdir()
    (old / "hf" / "config.json").write_text("{}")
    (old / "sugarcrepe.json").write_text("{}")
    with caplog.at_level(logging.WARNING, logger="compclip.train"):
        train(settings_config(tmp_path, "run", steps=8, save_every=2, keep=2, schedule="const"))
    folders = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step_*"))
    assert folders == ["step_0000002", "step_0000006", "step_0000008"]  # step 4 went whole
    assert sorted(p.name for p in old.iterdir()) == ["hf", "sugarcrepe.json"] and not (old / CONFIG_NAME).exists()
    kept = [r.getMessage() for r in caplog.records if "kept the folder" in r.getMessage()]
    assert kept == [f"--keep 2: removed the checkpoint files of {old}, kept the folder for what else it holds (hf, sugarcrepe.json)"]


def test_the_eval_cache_misses_when_the_checkpoints_preprocessing_changes(tmp_path, capsys):
    """The reported case: the same weights with another mean and std in config.json and open_clip_config.json must be
    encoded again; the cached run's numbers equal an uncached run's of the edited checkpoint."""
    import json

    from PIL import Image

    from compclip.models import load_model, save_checkpoint
    from conftest import run_main

    model, _, _ = load_model("compclip-tiny-clip")
    save_checkpoint(model, tmp_path / "ckpt")
    folder = tmp_path / "data" / "retrieval" / "tiny"
    folder.mkdir(parents=True)
    rows = []
    for k, (name, colour) in enumerate([("red", (220, 30, 30)), ("green", (30, 200, 40)), ("blue", (30, 40, 220)), ("grey", (128,) * 3)]):
        Image.new("RGB", (48, 40), colour).save(folder / f"{k}.png")
        rows.append(f"{k}.png,a {name} square")
    (folder / "captions.csv").write_text("image,caption\n" + "\n".join(rows) + "\n")

    def evaluate(out, *cache):
        code, printed, err = run_main(capsys, "eval", "--model", tmp_path / "ckpt", "--benchmark", "retrieval", "--data-root",
                                      tmp_path / "data", "--out", tmp_path / out, "--workers", "0", *cache)
        assert code == 0, err
        return json.loads((tmp_path / out / "retrieval.json").read_text())["metrics"]["tiny"], printed + err

    evaluate("first", "--cache", tmp_path / "cache")
    for name in ("config.json", "open_clip_config.json"):
        config = json.loads((tmp_path / "ckpt" / name).read_text())
        config["preprocess_cfg"].update(mean=[0.9, 0.1, 0.5], std=[0.05, 0.5, 0.2])
        (tmp_path / "ckpt" / name).write_text(json.dumps(config))
    cached, _ = evaluate("second", "--cache", tmp_path / "cache")
    fresh, _ = evaluate("fresh")
    assert cached == fresh
    assert len(list((tmp_path / "cache").iterdir())) == 2  # a folder per (weights, preprocessing, versions, precision)
