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
    result = compclip("--quiet", "demo", "--steps", "4", "--out", str(tmp_path / "demo"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"checkpoint reload bit-identical\s+│ True", result.stdout)
    assert re.search(r"open_clip loads export, same output\s+│ True", result.stdout)
    assert "254 / 2 (corrupt image 1, empty caption 1)" in result.stdout
    # only the base model starts from random weights; reloads say nothing misleading
    assert result.stderr.count("initialized randomly") == 1
    assert "fine-tuning" not in result.stderr  # --quiet hides progress bars
    config = json.loads((tmp_path / "demo" / "checkpoint" / "config.json").read_text())
    assert config["method"] == "siglip" and config["train_args"]["steps"] == 4
