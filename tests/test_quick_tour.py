"""The README's code, run as written: the quick tour on the real Flickr8k photos, and the two extension examples
(a method and a benchmark from outside the package) through the command line."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import torch
from PIL import Image

from conftest import shared_data

README = Path(__file__).resolve().parents[1] / "README.md"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def readme_block(marker: str, language: str) -> str:
    match = re.search(rf"<!-- {marker} -->\n```{language}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert match, f"README.md lost its {marker} block"
    return match.group(1)


def test_the_readme_quick_tour_runs_as_written(tmp_path):
    flickr = shared_data("flickr8k_1k")
    script = readme_block("quick-tour", "bash").replace("F=path/to/flickr8k_1k", f"F={flickr}")
    assert f"F={flickr}" in script
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    tour = tmp_path / "runs" / "tour"
    for made in ("concepts/manifest.json", "c2lip/checkpoints/step_0000020/model.safetensors", "results/base/retrieval.json",
                 "results/c2lip/retrieval.json", "report/report.md", "report/summary.csv", "attention.png", "c2lip-hf/model.safetensors",
                 "c2lip-hf/README.md"):
        assert (tour / made).is_file(), made
    assert "nothing evaluated" not in result.stdout and "retrieval: mean_recall@1" in result.stdout
    assert "flickr8k_1k_images 1,000," in result.stdout  # a count printed as a count, not as a score (1000.0000)
    assert "note: tokenizer:" in result.stdout and "open_clip.SimpleTokenizer(context_length=64)" in result.stdout
    assert "| retrieval | mean_recall@1 |" in (tour / "c2lip-hf" / "README.md").read_text()  # the card found its scores


def run_with(module: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`compclip ARGS` in a fresh process that imported `module` (a README block saved in `tmp_path`) first."""
    code = f"import {module}; from compclip.cli import main; main({list(args)!r})"
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


COLOURS = {"red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 220), "white": (250, 250, 250)}


def test_the_readme_method_example_trains_from_the_command_line(tmp_path):
    (tmp_path / "readme_method.py").write_text(readme_block("example: method", "python"))
    for name, colour in COLOURS.items():
        Image.new("RGB", (40, 40), colour).save(tmp_path / f"{name}.png")
    (tmp_path / "pairs.csv").write_text("image,caption\n" + "".join(f"{n}.png,a {n} square\n" for n in COLOURS))
    listing = run_with("readme_method", tmp_path, "methods")
    assert "smoothclip\n  smoothing=0.1: label smoothing of the image-to-text targets" in listing.stdout, listing.stderr
    run = run_with("readme_method", tmp_path, "train", "--method", "smoothclip", "--method-opt", "smoothing=0.2", "--model",
                   "compclip-tiny-siglip", "--train-data", "pairs.csv", "--out", "run", "--steps", "2", "--batch-size", "4",
                   "--workers", "0", "--lr", "1e-3")
    assert run.returncode == 0, run.stderr[-3000:]
    assert re.search(r"finished 2 steps; the last step's loss: smoothclip \d", run.stdout)
    config = json.loads((tmp_path / "run" / "checkpoints" / "step_0000002" / "config.json").read_text())
    assert config["method"] == "smoothclip" and config["train_args"]["method_options"] == {"smoothing": "0.2"}


def test_the_readme_benchmark_example_scores_by_its_rule(tmp_path):
    from compclip.models import load_model

    (tmp_path / "readme_benchmark.py").write_text(readme_block("example: benchmark", "python"))
    folder = tmp_path / "data" / "caption_pairs"
    folder.mkdir(parents=True)
    others = [*list(COLOURS)[1:], "red"]  # each image's false caption names the next colour
    rows = [(f"{name}.png", f"a {name} square", f"a {other} square") for name, other in zip(COLOURS, others, strict=True)]
    for name, colour in COLOURS.items():
        Image.new("RGB", (40, 40), colour).save(folder / f"{name}.png")
    (folder / "test.csv").write_text("image,caption,negative\n" + "".join(",".join(r) + "\n" for r in rows))
    torch.manual_seed(0)
    model, _, _ = load_model("compclip-tiny-siglip")
    from compclip.models import save_checkpoint

    save_checkpoint(model, tmp_path / "ckpt")
    run = run_with("readme_benchmark", tmp_path, "eval", "--model", str(tmp_path / "ckpt"), "--benchmark", "caption_pairs",
                   "--data-root", "data", "--out", "results", "--workers", "0")
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "results" / "caption_pairs.json").read_text())
    # the reference: open_clip's own forward pass, cosine of normalised embeddings, a tie wrong
    model, preprocess, tokenizer = load_model(str(tmp_path / "ckpt"))
    with torch.no_grad():
        images = torch.stack([preprocess(Image.open(folder / image).convert("RGB")) for image, _, _ in rows])
        image_features = torch.nn.functional.normalize(model.encode_image(images), dim=-1)
        true = (image_features * torch.nn.functional.normalize(model.encode_text(tokenizer([r[1] for r in rows])), dim=-1)).sum(-1)
        false = (image_features * torch.nn.functional.normalize(model.encode_text(tokenizer([r[2] for r in rows])), dim=-1)).sum(-1)
    assert result["metrics"]["all"] == {"acc": (true > false).sum().item() / len(rows), "n": len(rows)}
    assert result["dataset"] == "caption_pairs" and result["ties"] == "strict" and result["complete"]
