"""The command line, run as a user runs it: a real `compclip` process."""
import json
import os
import re
import subprocess
import sys

import open_clip
import torch

from compclip.models import load_model, save_checkpoint


def compclip(*args, cwd=None):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}  # rich wraps tables at 80
    return subprocess.run([sys.executable, "-m", "compclip", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_help_lists_the_commands():
    result = compclip("--help")
    assert result.returncode == 0
    for command in ("version", "export", "demo", "--quiet"):
        assert command in result.stdout


def test_version():
    import compclip as pkg

    result = compclip("version")
    assert result.returncode == 0 and result.stdout.startswith(f"compclip {pkg.__version__}\n")
    assert f"open-clip-torch {open_clip.__version__}" in result.stdout


def test_export_writes_a_file_open_clip_loads(tmp_path):
    model, _, tokenizer = load_model("compclip-tiny-clip")
    save_checkpoint(model, tmp_path / "ckpt")
    result = compclip("export", str(tmp_path / "ckpt"), str(tmp_path / "out.safetensors"))
    assert result.returncode == 0, result.stderr
    assert "open_clip.create_model_and_transforms('compclip-tiny-clip'" in result.stdout
    plain = open_clip.create_model("compclip-tiny-clip", pretrained=str(tmp_path / "out.safetensors")).eval()
    with torch.no_grad():
        tokens = tokenizer(["a red couch"])
        assert torch.equal(plain.encode_text(tokens), model.encode_text(tokens))


def test_user_errors_are_one_line_not_a_traceback(tmp_path):
    result = compclip("export", str(tmp_path / "nothing"), str(tmp_path / "out.safetensors"))
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {tmp_path / 'nothing' / 'config.json'}: not a compclip checkpoint folder (no config.json)"


def test_demo_runs_end_to_end(tmp_path):
    """`make demo`'s pipeline at toy size: world, concepts, pretraining, two fine-tunes, evaluation, report."""
    args = ["--quiet", "demo", "--out", str(tmp_path / "demo"), "--n-train", "300", "--n-test", "40",
            "--pretrain-steps", "3", "--steps", "2", "--batch-size", "16"]
    result = compclip(*args)
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"c2lip-ft\s+│ unseen", result.stdout) and "SC swap-att" in result.stdout
    for model in ("base", "siglip-ft", "c2lip-ft"):
        for split in ("seen", "unseen"):
            record = json.loads((tmp_path / "demo" / "results" / model / split / "sugarcrepe.json").read_text())
            assert record["complete"] and record["metrics"]["swap_att"]["n"] > 0
    assert "| c2lip-ft/unseen |" in (tmp_path / "demo" / "report" / "report.md").read_text()
    config = json.loads((tmp_path / "demo" / "train" / "c2lip" / "checkpoints" / "step_0000002" / "config.json").read_text())
    assert config["method"] == "c2lip" and config["train_args"]["model"].endswith("step_0000003")
    again = compclip(*args)  # everything is reused: nothing is trained again
    assert again.returncode == 0 and "initialized randomly" not in again.stderr


def one_error_line(result) -> str:
    """The single `error:` line a user error must print (exit 2, no traceback)."""
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr[-2000:]
    return lines[0]


def test_unknown_model_in_eval_is_one_error_line(tmp_path):
    line = one_error_line(compclip("eval", "--model", "nope", "--benchmark", "sugarcrepe", "--out", str(tmp_path / "x"),
                                   "--data-root", str(tmp_path)))
    assert "unknown model 'nope'" in line


def test_csv_without_the_caption_column_is_one_error_line(tmp_path):
    (tmp_path / "c.csv").write_text("image,text\na.jpg,a red cube\n")
    line = one_error_line(compclip("concepts", str(tmp_path / "c.csv"), "--out", str(tmp_path / "store")))
    assert str(tmp_path / "c.csv") in line and "no column 'caption'" in line and "--caption-key" in line


def test_concept_store_without_pos_for_clic_is_one_error_line(tmp_path):
    from compclip.concepts import build_store

    build_store(["a red cube. a blue ball."], tmp_path / "store", "noun-phrases", workers=1)
    (tmp_path / "d.csv").write_text("image,caption\na.jpg,a red cube. a blue ball.\n")
    line = one_error_line(compclip("train", "--method", "clic", "--model", "compclip-tiny-clip", "--train-data", str(tmp_path / "d.csv"),
                                   "--concepts", str(tmp_path / "store"), "--out", str(tmp_path / "run"), "--steps", "1"))
    assert "['pos']" in line and str(tmp_path / "store") in line and "--what pos" in line
