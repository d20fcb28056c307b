"""Misuse and faults, as a user meets them on the command line: each case's exit code, its one `error:` line (never a
traceback), and what is and is not on disk afterwards; no result ever comes from a NaN."""
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from conftest import run_main
from test_train import make_dataset

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
TRAIN = ("train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--batch-size", "8", "--workers", "0", "--lr", "1e-4")


def compclip(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "compclip", "-q", *map(str, args)], capture_output=True, text=True, env=ENV,
                          timeout=300, **kwargs)


def in_process(capsys, *args) -> subprocess.CompletedProcess:
    """`compclip -q ARGS` through the same entry point in this process: for a command whose assertions read its exit code,
    its output and the files it writes, where a fresh interpreter (its imports cost seconds) would add nothing to them."""
    return subprocess.CompletedProcess(args, *run_main(capsys, "-q", *args))


def one_line(result, code: int, *fragments: str) -> str:
    """The run ended with `code` and, for an error, one `error:` line holding each fragment; never a traceback."""
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    if code == 2:
        lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert len(lines) == 1, result.stderr[-3000:]
        for fragment in fragments:
            assert fragment in lines[0], (fragment, lines[0])
    assert result.returncode == code, result.stderr[-3000:]
    return result.stderr


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A 16-image training set and a 2-step run of it (checkpoints at steps 1 and 2)."""
    root = tmp_path_factory.mktemp("misuse")
    data = make_dataset(root, n=16)
    run = one_line(compclip(*TRAIN, "--train-data", data, "--out", root / "run", "--steps", 2, "--save-every", 1), 0)
    assert run is not None
    return root, data


def copy_run(work, name):
    root, _ = work
    shutil.copytree(root / "run", root / name)
    return root / name


# ---- training ------------------------------------------------------------------------------------------------------


def test_a_diverging_run_stops_and_never_saves_a_nan(work, capsys):
    root, data = work
    out = root / "diverged"
    result = in_process(capsys, *TRAIN[:-2], "--lr", "1e6", "--train-data", data, "--out", out, "--steps", 6, "--save-every", 1)
    text = one_line(result, 2, "training stopped")
    assert "nan" in text.lower() or "inf" in text.lower() or "not finite" in text
    for folder in sorted((out / "checkpoints").glob("step_*")) if (out / "checkpoints").exists() else []:
        weights = load_file(folder / "model.safetensors")
        assert all(torch.isfinite(t).all() for t in weights.values() if t.is_floating_point()), folder
    # asked to skip such steps, the run goes on without updating on them, and says so at each
    skipping = in_process(capsys, *TRAIN[:-2], "--lr", "1e6", "--train-data", data, "--out", root / "skipping", "--steps", 6,
                          "--skip-nonfinite", 6)
    text = one_line(skipping, 0)
    assert "skipped, no update (1 of --skip-nonfinite 6)" in text


def test_a_checkpoint_with_nan_weights_is_refused_not_scored(work, capsys):
    root, _ = work
    broken = copy_run(work, "nan-run") / "checkpoints" / "step_0000002"
    weights = load_file(broken / "model.safetensors")
    name = next(k for k in weights if k.startswith("visual"))
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file(weights, broken / "model.safetensors")
    (root / "evalroot" / "retrieval" / "three").mkdir(parents=True, exist_ok=True)
    for i, colour in enumerate(("red", "green", "blue")):
        Image.new("RGB", (32, 32), colour).save(root / "evalroot" / "retrieval" / "three" / f"{i}.png")
    (root / "evalroot" / "retrieval" / "three" / "captions.csv").write_text("image,caption\n0.png,red\n1.png,green\n2.png,blue\n")
    result = in_process(capsys, "eval", "--model", broken, "--benchmark", "retrieval", "--data-root", root / "evalroot", "--out",
                        root / "nan-out", "--device", "cpu")
    one_line(result, 2, f"{broken / 'model.safetensors'}: weight {name} holds NaN or inf: refused")
    assert not list((root / "nan-out").glob("*.json"))
    one_line(in_process(capsys, "export", broken, root / "nan.safetensors"), 2, "holds NaN or inf")


@pytest.mark.parametrize("dtype", [torch.int8, torch.bool])
def test_a_checkpoint_of_integer_or_boolean_weights_is_refused_not_cast_and_scored(work, capsys, dtype):
    """A quantized or foreign export: loading would cast its integers to floats and score them. Refused from the file's
    header, naming the weight and its type; the same file with float weights loads."""
    from compclip.models import load_model

    root, _ = work
    odd = copy_run(work, f"{dtype}-run") / "checkpoints" / "step_0000002"
    weights = load_file(odd / "model.safetensors")
    name = sorted(k for k in weights if k.startswith("visual") and weights[k].ndim == 2)[0]
    weights[name] = weights[name].to(dtype)
    save_file(weights, odd / "model.safetensors")
    said = {torch.int8: "I8", torch.bool: "BOOL"}[dtype]
    (root / "evalroot" / "retrieval" / "three").mkdir(parents=True, exist_ok=True)
    for i, colour in enumerate(("red", "green", "blue")):
        Image.new("RGB", (32, 32), colour).save(root / "evalroot" / "retrieval" / "three" / f"{i}.png")
    (root / "evalroot" / "retrieval" / "three" / "captions.csv").write_text("image,caption\n0.png,red\n1.png,green\n2.png,blue\n")
    result = in_process(capsys, "eval", "--model", odd, "--benchmark", "retrieval", "--data-root", root / "evalroot", "--out",
                        root / f"{dtype}-out", "--device", "cpu")
    one_line(result, 2, f"{odd / 'model.safetensors'}: weight {name} is {said}, not floating point: a quantized or foreign export")
    weights[name] = weights[name].float()
    save_file(weights, odd / "model.safetensors")
    load_model(str(odd))


def test_an_out_under_a_regular_file_is_one_line_for_train_and_concepts(work, capsys):
    root, data = work
    (root / "a-file").write_text("not a folder")
    one_line(in_process(capsys, *TRAIN, "--train-data", data, "--out", root / "a-file" / "run", "--steps", 1), 2,
             f"{root / 'a-file' / 'run' / '.lock'}: not written: a folder on its path is a file")
    one_line(in_process(capsys, "concepts", data, "--out", root / "a-file" / "store"), 2,
             f"{root / 'a-file' / 'store'}", "not written: a folder on its path is a file")


def test_two_runs_cannot_share_a_folder(work):
    root, data = work
    out = root / "shared"
    first = subprocess.Popen([sys.executable, "-m", "compclip", "-q", *TRAIN, "--train-data", str(data), "--out", str(out),
                              "--steps", "400", "--save-every", "400"], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (out / "log.jsonl").is_file() and first.poll() is None:
            time.sleep(0.1)
        assert first.poll() is None, first.stderr.read()[-2000:]
        second = compclip(*TRAIN, "--train-data", data, "--out", out, "--steps", 400, "--save-every", 400, "--seed", 7)
        one_line(second, 2, f"--out {out} is in use by another compclip train (host ", f"pid {first.pid}")
    finally:
        first.kill()
        first.wait()
    lines = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == list(range(1, len(lines) + 1))  # one run's lines only


@pytest.mark.parametrize("change, fragment", [
    (("--batch-size", "4"), "batch_size 8 -> 4"),
    (("--method", "c2lip"), "method 'siglip' -> 'c2lip'"),
    (("--model", "compclip-tiny-clip"), "model 'compclip-tiny-siglip' -> 'compclip-tiny-clip'"),
    (("--steps", "1"), "steps 2 -> 1"),  # more steps extend a run (test_train), fewer are another run
])
def test_resume_refuses_another_runs_options(work, capsys, change, fragment):
    _, data = work
    out = copy_run(work, f"resume-{change[0][2:]}")
    args = dict(zip(TRAIN[1::2], TRAIN[2::2], strict=True))
    args.update({"--steps": "2", "--save-every": "1", change[0]: change[1]})
    result = in_process(capsys, "train", *[x for kv in args.items() for x in kv], "--train-data", data, "--out", out)
    one_line(result, 2, fragment, f"--model {out / 'checkpoints' / 'step_0000002'} --out ANOTHER_FOLDER")
    assert json.loads((out / "config.json").read_text())["batch_size"] == 8  # the run's own record is left alone


def test_a_finished_run_run_again_says_there_is_nothing_to_train(work, capsys):
    """It printed "finished 2 steps: " and nothing after it, as if the run had trained and lost its figures."""
    _, data = work
    out = copy_run(work, "finished")
    before = (out / "log.jsonl").read_text()
    result = in_process(capsys, *TRAIN, "--train-data", data, "--out", out, "--steps", "2", "--save-every", "1")
    assert result.returncode == 0 and result.stdout.strip() == (
        f"nothing to train: {out} has finished its 2 steps; more --steps extend it, or a second stage starts from its weights: --model "
        f"{out / 'checkpoints' / 'step_0000002'} --out ANOTHER_FOLDER")
    assert (out / "log.jsonl").read_text() == before


def test_a_damaged_training_state_offers_the_previous_checkpoint(work, capsys):
    _, data = work
    out = copy_run(work, "damaged")
    state = out / "checkpoints" / "step_0000002" / "training_state.pt"
    state.write_bytes(state.read_bytes()[:100])
    result = in_process(capsys, *TRAIN, "--train-data", data, "--out", out, "--steps", 2, "--save-every", 1)
    one_line(result, 2, f"{state}: damaged, cannot resume", f"the previous checkpoint {out / 'checkpoints' / 'step_0000001'} is complete")


def test_workers_that_each_get_too_few_rows_are_named_and_nothing_is_written(work, capsys):
    root, data = work
    out = root / "workers"
    result = in_process(capsys, "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--workers", 4, "--batch-size", 6,
                        "--train-data", data, "--out", out, "--steps", 2)
    one_line(result, 2, "split among the 4 DataLoader workers", "lower --workers")
    assert not out.exists()


def test_a_csv_with_a_bom_trains(work, tmp_path, capsys):
    _, data = work
    bommed = tmp_path / "bom.csv"
    bommed.write_bytes(b"\xef\xbb\xbf" + data.read_bytes().replace(b"img/", str(data.parent / "img").encode() + b"/"))
    one_line(in_process(capsys, *TRAIN, "--train-data", bommed, "--out", tmp_path / "run", "--steps", 1), 0)


def test_an_oversized_image_is_a_named_skip_not_a_bomb_warning(work, tmp_path):
    _, data = work
    Image.MAX_IMAGE_PIXELS = None  # to write it
    try:
        Image.new("L", (10_000, 10_000)).save(tmp_path / "huge.png", optimize=False, compress_level=1)
    finally:
        Image.MAX_IMAGE_PIXELS = 89_478_485
    rows = data.read_text().splitlines()
    rows = [rows[0], f"{tmp_path / 'huge.png'},a huge grey square"] + [r.replace("img/", f"{data.parent / 'img'}/") for r in rows[1:]]
    (tmp_path / "train.csv").write_text("\n".join(rows) + "\n")
    result = compclip(*TRAIN, "--train-data", tmp_path / "train.csv", "--out", tmp_path / "run", "--steps", 1, "--shuffle", 0)
    text = one_line(result, 0)
    assert "DecompressionBombWarning" not in text and "DOS attack" not in text
    assert f"skipped image too large: {tmp_path / 'train.csv'}:2 ({tmp_path / 'huge.png'}: 100,000,000 pixels, over the 89,478,485 PIL " \
           "decodes safely)" in text


# ---- evaluation ----------------------------------------------------------------------------------------------------


def test_an_undecodable_image_is_counted_and_named_and_the_rest_is_scored(work, tmp_path, capsys):
    root, _ = work
    folder = tmp_path / "data" / "retrieval" / "three"
    folder.mkdir(parents=True)
    for i, colour in enumerate(("red", "green", "blue")):
        Image.new("RGB", (32, 32), colour).save(folder / f"{i}.png")
    (folder / "bad.jpg").write_text("not an image")
    (folder / "captions.csv").write_text("image,caption\n0.png,red\n1.png,green\n2.png,blue\nbad.jpg,a text file\n")
    sc = tmp_path / "data" / "sugarcrepe"
    sc.mkdir()
    (tmp_path / "data" / "coco" / "val2017").mkdir(parents=True)
    Image.new("RGB", (32, 32), "red").save(tmp_path / "data" / "coco" / "val2017" / "1.jpg")
    (tmp_path / "data" / "coco" / "val2017" / "2.jpg").write_bytes(b"\xff\xd8 truncated")
    (sc / "swap_att.json").write_text(json.dumps({"0": {"filename": "1.jpg", "caption": "a", "negative_caption": "b"},
                                                  "1": {"filename": "2.jpg", "caption": "c", "negative_caption": "d"}}))
    result = in_process(capsys, "eval", "--model", root / "run" / "checkpoints" / "step_0000002", "--benchmark", "sugarcrepe,retrieval",
                        "--data-root", tmp_path / "data", "--out", tmp_path / "out", "--device", "cpu")
    one_line(result, 0)
    retrieval = json.loads((tmp_path / "out" / "retrieval.json").read_text())
    assert retrieval["metrics"]["three"]["images"] == 3 and retrieval["complete"] is False
    assert retrieval["missing_images"]["unreadable"] == 1
    assert "bad.jpg (unreadable: UnidentifiedImageError" in retrieval["missing_images"]["examples"][0]
    sugar = json.loads((tmp_path / "out" / "sugarcrepe.json").read_text())
    assert sugar["metrics"]["swap_att"]["n"] == 1 and sugar["missing_images"]["unreadable"] == 1


def test_an_unwritable_out_is_found_before_the_model_loads(work, tmp_path):
    """A folder no one may write, root included: a read-only mount (a tmpfs in a mount namespace of the test's own; as a
    user who is not root, the folder's permission bits). Permission bits alone stop nobody as root, which CI runs as."""
    _ = work
    locked = tmp_path / "locked"
    locked.mkdir()
    command = [sys.executable, "-m", "compclip", "-q", "eval", "--model", "compclip-tiny-clip", "--benchmark", "retrieval",
               "--data-root", str(tmp_path), "--out", str(locked / "out"), "--device", "cpu"]
    if os.geteuid() == 0:
        command = ["unshare", "--mount", "sh", "-c", f"mount -t tmpfs -o ro tmpfs {locked} && exec \"$@\"", "sh", *command]
    else:
        locked.chmod(0o500)
    try:
        one_line(subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=300), 2,
                 f"--out {locked / 'out'}: cannot write there")
    finally:
        locked.chmod(0o700)
    assert not (locked / "out").exists()


def test_an_unwritable_out_is_checked_by_writing_there(work, tmp_path, capsys):
    """Root may write anywhere; a file where the folder should go stops it as early."""
    (tmp_path / "blocked").write_text("a file")
    result = in_process(capsys, "eval", "--model", "compclip-tiny-clip", "--benchmark", "retrieval", "--data-root", tmp_path,
                        "--out", tmp_path / "blocked" / "out", "--device", "cpu")
    one_line(result, 2, f"--out {tmp_path / 'blocked' / 'out'}: cannot write there")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with a GPU takes --device cuda")
def test_eval_on_a_gpu_that_is_not_there_is_one_line(work, tmp_path, capsys):
    result = in_process(capsys, "eval", "--model", "compclip-tiny-clip", "--benchmark", "retrieval", "--data-root", tmp_path, "--out",
                        tmp_path / "o", "--device", "cuda")
    one_line(result, 2, "--device cuda: torch sees 0 GPU(s) here")


# ---- export and checkpoint folders ---------------------------------------------------------------------------------


def test_export_never_overwrites_unasked_or_replaces_what_it_did_not_write(work, tmp_path, capsys):
    root, _ = work
    ckpt = root / "run" / "checkpoints" / "step_0000002"
    (tmp_path / "taken.safetensors").write_text("keep me")
    one_line(in_process(capsys, "export", ckpt, tmp_path / "taken.safetensors"), 2, "exists: pass --force to overwrite it")
    assert (tmp_path / "taken.safetensors").read_text() == "keep me"
    one_line(in_process(capsys, "export", ckpt, tmp_path / "taken.safetensors", "--force"), 0)
    (tmp_path / "empty").mkdir()
    one_line(in_process(capsys, "export", ckpt, tmp_path / "empty"), 0)
    assert (tmp_path / "empty" / "open_clip_model.safetensors").is_file()
    one_line(in_process(capsys, "export", ckpt, tmp_path / "empty"), 2, "holds an earlier export: pass --force to replace it")
    one_line(in_process(capsys, "export", ckpt, tmp_path / "empty", "--format", "hf", "--force"), 0)
    assert (tmp_path / "empty" / "model.safetensors").is_file() and not (tmp_path / "empty" / "open_clip_model.safetensors").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    for force in ((), ("--force",)):
        one_line(in_process(capsys, "export", ckpt, tmp_path / "mine", *force), 2, "holds files that no compclip export wrote")
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]
    one_line(in_process(capsys, "export", ckpt, tmp_path / "x.safetensors", "--format", "hf"), 2, "--format hf writes a folder")
    one_line(in_process(capsys, "export", ckpt, tmp_path / "x", "--format", "onnx"), 2, "unknown export format 'onnx'")


@pytest.mark.parametrize("damage, fragment", [
    ("no config", "a folder, but not a compclip checkpoint: no config.json (it holds model.safetensors"),
    ("no open_clip config", "open_clip_config.json: missing from the checkpoint folder"),
    ("edited model_name", "model_name 'compclip-tiny-clip' does not match the folder's architecture"),
])
def test_a_damaged_checkpoint_folder_is_named(work, tmp_path, capsys, damage, fragment):
    root, _ = work
    folder = tmp_path / "ckpt"
    shutil.copytree(root / "run" / "checkpoints" / "step_0000002", folder)
    if damage == "no config":
        (folder / "config.json").unlink()
    elif damage == "no open_clip config":
        (folder / "open_clip_config.json").unlink()
    else:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "model_name": "compclip-tiny-clip"}))
    for args in (("eval", "--model", folder, "--benchmark", "retrieval", "--data-root", tmp_path, "--out", tmp_path / "o",
                  "--device", "cpu"), ("export", folder, tmp_path / "x.safetensors")):
        one_line(in_process(capsys, *args), 2, fragment)


# ---- concepts: the trainer's rule for bytes that are not UTF-8 ------------------------------------------------------


def test_concepts_skip_a_caption_that_is_not_utf8_as_training_does(tmp_path, capsys):
    (tmp_path / "c.csv").write_bytes(b"\xef\xbb\xbfimage,caption\na.jpg,a red couch\nb.jpg,caf\xe9 chairs\n")
    result = in_process(capsys, "concepts", tmp_path / "c.csv", "--out", tmp_path / "store", "--workers", 1)
    text = one_line(result, 0)
    from compclip.concepts import ConceptStore

    store = ConceptStore(tmp_path / "store")
    assert store.get("a red couch") is not None  # the BOM left the caption column readable
    assert store.get("caf\ufffd chairs") is None  # the Latin-1 row is skipped, not parsed with a replacement character
    assert f"{tmp_path / 'c.csv'}:3: skipped a caption whose bytes are not UTF-8" in text


def test_nothing_is_scored_from_a_nan_embedding(tmp_path):
    """A scorer refuses a non-finite embedding before any benchmark turns it into a score."""
    from compclip.errors import NonFiniteError
    from compclip.eval import DualEncoderScorer

    class Broken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def encode_image(self, images):
            return torch.full((images.shape[0], 4), float("nan"))

        def encode_text(self, tokens):
            return torch.ones(tokens.shape[0], 4)

    scorer = DualEncoderScorer(Broken(), lambda im: torch.from_numpy(np.asarray(im.resize((4, 4)), dtype=np.float32)),
                               lambda texts: torch.ones(len(texts), 3, dtype=torch.long), workers=0)
    Image.new("RGB", (8, 8)).save(tmp_path / "nan.png")
    with pytest.raises(NonFiniteError, match="non-finite embedding"):
        scorer.matrix([tmp_path / "nan.png"], ["a caption"])
