"""Training: exact accumulation and multi-process equivalence (real torchrun and SLURM-style
launches with gloo), exact resume after SIGKILL, and the trainer end to end."""
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import dist_grads
from compclip.errors import MissingFileError, UsageError
from compclip.models import load_model
from compclip.train import DistEnv
from conftest import run_main, run_tree

HERE = Path(__file__).parent


def assert_same(a, b, rel=1e-5, grad_rel=3e-5, term_abs=None, grad_abs=1e-8):
    """The same loss terms and gradients, (terms, grads) each: gradients to `grad_rel` of each one's own scale,
    for float32 sums in another order (more threads, or another device, reorder more)."""
    terms_a, grads_a = a
    terms_b, grads_b = b
    assert terms_a.keys() == terms_b.keys() and terms_a
    for k in terms_a:
        assert terms_a[k] == pytest.approx(terms_b[k], rel=rel, abs=term_abs), k
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        scale = grads_a[name].abs().max().item()
        assert (grads_a[name] - grads_b[name]).abs().max().item() <= grad_rel * scale + grad_abs, name
    assert sum(g.abs().sum() for g in grads_a.values()) > 0


@pytest.fixture(scope="module")
def whole_batch():
    return dist_grads.compute(DistEnv())


def test_two_accumulation_steps_of_half_equal_one_step(whole_batch):
    assert whole_batch[0].keys() == {"siglip", "npc", "xac"}
    assert_same(dist_grads.compute(DistEnv(), accum=2), whole_batch)


def test_hard_negatives_accumulate_exactly():
    """Negatives belong to their image's row: their owners must follow it through the micro-batch merge."""
    whole = dist_grads.compute(DistEnv(), 1, "c2lip+hardneg")
    assert whole[0].keys() == {"npc", "xac", "hardneg"}
    assert_same(dist_grads.compute(DistEnv(), 2, "c2lip+hardneg"), whole)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_for_children():
    """The tree under test first (the compclip this process imported, and tests/ for dist_grads), then whatever PYTHONPATH
    held: a child imports the same compclip, not an installed one (nor, under tests/mutations.py, the unmutated one)."""
    import compclip

    path = [str(Path(compclip.__file__).parents[1]), str(HERE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(path)}


def test_children_import_the_tree_under_test():
    found = subprocess.run([sys.executable, "-c", "import compclip, dist_grads; print(compclip.__file__)"], env=env_for_children(),
                           capture_output=True, text=True, cwd="/", timeout=120)
    assert found.returncode == 0, found.stderr
    import compclip

    assert Path(found.stdout.strip()) == Path(compclip.__file__)


def load_result(path):
    result = torch.load(path, weights_only=True)
    assert result["world_size"] == 2
    return result["terms"], result["grads"]


TWO_PROCESS_CASES = [(1, "c2lip"), (2, "c2lip"), (2, "c2lip+hardneg"), (2, "siglip"), (1, "clip"), (2, "c2lip+negclip"),
                     (1, "hardneg"), (2, "negclip"), (1, "occlip"), (2, "occlip")]


@pytest.fixture(scope="module")
def two_process_steps(tmp_path_factory):
    """Every case's step under one torchrun launch of two processes (a launch costs more than the ten steps): {case: result}."""
    out = tmp_path_factory.mktemp("two-processes") / "grads.pt"
    cases = ",".join(f"{accum}:{method}" for accum, method in TWO_PROCESS_CASES)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           str(HERE / "dist_grads.py"), str(out), cases]
    result = run_tree(cmd, env=env_for_children(), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(out, weights_only=True)


@pytest.mark.parametrize("accum, method", TWO_PROCESS_CASES)
def test_torchrun_two_processes_equal_one_process_on_the_whole_batch(two_process_steps, whole_batch, accum, method):
    result = two_process_steps[f"{accum}:{method}"]
    assert result["world_size"] == 2
    assert_same((result["terms"], result["grads"]), whole_batch if method == "c2lip" else dist_grads.compute(DistEnv(), 1, method))


def test_slurm_launch_without_torchrun(tmp_path, whole_batch):
    """srun starts one task per GPU with SLURM's variables and no torchrun ones."""
    out = tmp_path / "grads.pt"
    env = {k: v for k, v in env_for_children().items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
    env.update(SLURM_NTASKS="2", SLURM_JOB_NODELIST="localhost", MASTER_PORT=str(free_port()))
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "dist_grads.py"), str(out)],
            env={**env, "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    assert_same(load_result(out), whole_batch)


def make_dataset(root: Path, n: int = 48, nouns: bool = True) -> Path:
    from PIL import Image, ImageDraw

    colours = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 70, 220), "yellow": (230, 210, 40)}
    (root / "img").mkdir(parents=True)
    rows = []
    for i in range(n):
        a, b = list(colours)[i % 4], list(colours)[(i // 4) % 4]
        img = Image.new("RGB", (64, 64), (120, 120, 120))
        draw = ImageDraw.Draw(img)
        draw.rectangle([4, 20, 28, 44], fill=colours[a])
        draw.ellipse([36, 20, 60, 44], fill=colours[b])
        img.save(root / "img" / f"{i}.jpg")
        caption = f"a {a} square to the left of a {b} circle" if nouns else ["very bright", "so nice", "running fast"][i % 3]
        rows.append(f"img/{i}.jpg,{caption}")
    (root / "train.csv").write_text("image,caption\n" + "\n".join(rows) + "\n")
    return root / "train.csv"


def compclip(*args, **kwargs):
    return [sys.executable, "-m", "compclip", "-q", *args]


def train_cmd(data, concepts, out, steps, extra=()):
    return compclip("train", "--method", "c2lip", "--model", "compclip-tiny-siglip", "--train-data", str(data),
                    "--concepts", str(concepts), "--out", str(out), "--steps", str(steps), "--batch-size", "8",
                    "--lr", "1e-4", "--save-every", "20", "--workers", "2", "--warmup", "3", *extra)


def losses(out: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, (out / "log.jsonl").read_text().splitlines())}


def test_a_killed_run_resumes_exactly(tmp_path, capsys):
    data = make_dataset(tmp_path)
    env = env_for_children()
    assert run_main(capsys, "-q", "concepts", data, "--out", tmp_path / "concepts")[0] == 0
    straight = subprocess.run(train_cmd(data, tmp_path / "concepts", tmp_path / "a", 26), env=env, capture_output=True, text=True)
    assert straight.returncode == 0, straight.stderr[-3000:]
    # a clean epoch is one line of the log (the pass's total), not one a worker: 26 steps of 6 batches make 4 epochs
    log_lines = (tmp_path / "a" / "train.log").read_text().splitlines()
    assert sum(f"{data}: read 48 samples, skipped none" in line for line in log_lines) == 4
    assert not any("[worker " in line for line in log_lines)

    proc = subprocess.Popen(
        train_cmd(data, tmp_path / "concepts", tmp_path / "b", 26), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    log = tmp_path / "b" / "log.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if log.is_file() and max(losses(tmp_path / "b"), default=0) >= 22:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = max(losses(tmp_path / "b"))
    assert 22 <= killed_at < 26, "the run should be killed after its checkpoint at step 20"
    with open(log, "a") as f:  # and a last line cut short, as a full disk or a kill mid-write leaves it
        f.write('{"step": 2')
    resumed = subprocess.run(train_cmd(data, tmp_path / "concepts", tmp_path / "b", 26), env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = losses(tmp_path / "a"), losses(tmp_path / "b")
    # one line per step in order: the resumed run dropped the killed run's lines past step 20
    # and started at 21 (a fresh start would have logged steps 1-20 again)
    steps = [json.loads(line)["step"] for line in (tmp_path / "b" / "log.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 27))
    assert [b[s] for s in range(21, 26)] == pytest.approx([a[s] for s in range(21, 26)], rel=1e-6)
    assert a[26] < a[1]
    final, _, _ = load_model(str(tmp_path / "b" / "checkpoints" / "step_0000026"))
    assert final.compclip_spec["model_name"] == "compclip-tiny-siglip"


def test_a_file_shuffled_whole_resumes_mid_epoch_at_the_same_sample(tmp_path):
    """The trainer's resume machinery over a CSV shuffled whole: 5 batches of 4 drawn by 2 DataLoader workers from 48
    rows and their position kept (`DataPosition`, what a checkpoint saves), a new reader started there (as `Trainer`
    starts it: epoch, positions, rotation) gives the uninterrupted epoch's last 7 batches, sample for sample. The order
    is the whole file's: the workers' first batches reach its last quarter (rows 36-47), which a shuffle buffer (the 8
    given here, for streams) over a worker's every other row in file order cannot (row 23 at most). The same seed draws
    the same order again, the next epoch another."""
    from torch.utils.data import DataLoader
    from torchvision.transforms import PILToTensor

    from compclip.data import open_reader
    from compclip.train.state import DataPosition

    data = make_dataset(tmp_path)

    def batches(position):
        reader = open_reader(data, transform=PILToTensor(), sample_seed=7000, shuffle=8)
        reader.start(position.epoch, position.positions, position.batches % 2)
        return iter(DataLoader(reader, batch_size=4, num_workers=2))

    def rows(batch):
        return [int(key.rsplit(":", 1)[1]) - 2 for key in batch["key"]]

    straight = [rows(b) for b in batches(DataPosition())]
    assert len(straight) == 12 and sorted(row for batch in straight for row in batch) == list(range(48))
    assert max(straight[0] + straight[1]) >= 36, straight
    position, stopped = DataPosition(), batches(DataPosition())
    for _ in range(5):
        position.consumed(next(stopped))
    del stopped
    assert [rows(b) for b in batches(position)] == straight[5:]
    again, next_epoch = ([rows(b) for b in batches(DataPosition(epoch))] for epoch in (0, 1))
    assert again == straight and next_epoch != straight and sorted(row for batch in next_epoch for row in batch) == list(range(48))


def test_captions_without_concepts_and_a_locked_image_tower(tmp_path, capsys):
    from compclip.train import TrainConfig, train

    data = make_dataset(tmp_path, n=16, nouns=False)
    from compclip.concepts import build_store, iter_captions

    build_store(iter_captions(data), tmp_path / "concepts")
    torch.manual_seed(0)
    before, _, _ = load_model("compclip-tiny-siglip")
    cfg = TrainConfig(method="c2lip", model="compclip-tiny-siglip", train_data=str(data), out=str(tmp_path / "run"),
                      concepts=str(tmp_path / "concepts"), batch_size=8, steps=3, lr=1e-3, workers=0, lock_image=True)
    with pytest.raises(ValueError) as stop:  # by default a concept method does not train on nothing under its name
        train(cfg)
    assert re.match(rf"c2lip: 0 of 8 captions of the first step have concepts it can use \(0\.0%\), from the concept store "
                    rf"{re.escape(str(tmp_path / 'concepts'))}, below --min-concept-coverage 0\.5; e\.g\. '(very bright|so nice|running "
                    rf"fast)' has none", str(stop.value))
    assert not (tmp_path / "run" / "checkpoints").exists()
    cfg.min_concept_coverage = 0.0
    from compclip.progress import configure

    configure(quiet=True)  # as `compclip -q train`: the console hides INFO lines, the run's train.log keeps them
    try:
        terms = train(cfg)
    finally:
        configure()
        logging.getLogger("compclip").setLevel(logging.NOTSET)
    assert "have concepts it can use" not in capsys.readouterr().err
    assert terms["npc"] == 0.0 and terms["xac"] == 0.0 and terms["siglip"] > 0
    assert [json.loads(line)["concept_coverage"] for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()] == [0.0] * 3
    assert "c2lip: 0 of 8 captions of the first step have concepts it can use" in (tmp_path / "run" / "train.log").read_text()
    after, _, _ = load_model(str(tmp_path / "run" / "checkpoints" / "step_0000003"))
    b, a = before.state_dict(), after.state_dict()
    assert all(torch.equal(b[k], a[k]) for k in b if k.startswith("visual."))
    assert any(not torch.equal(b[k], a[k]) for k in b if k.startswith("text."))


def test_the_coverage_refusal_names_an_uncovered_caption_of_the_first_step(tmp_path, caplog):
    """A first step of two micro-batches, the first without concepts, the second all covered: the refusal's example
    (and, where the share is let through, the warning's) is a caption of the first micro-batch the store lacks, not the
    empty example of the second, whose captions all have concepts."""
    from compclip.concepts import build_store, iter_captions
    from compclip.train import TrainConfig, train

    data = make_dataset(tmp_path, n=8)
    header, *rows = data.read_text().splitlines()
    (tmp_path / "covered.csv").write_text("\n".join([header, *rows[4:]]) + "\n")  # the second micro-batch's captions
    build_store(iter_captions(tmp_path / "covered.csv"), tmp_path / "concepts")
    uncovered = [row.split(",", 1)[1] for row in rows[:4]]
    cfg = TrainConfig(method="c2lip", model="compclip-tiny-siglip", train_data=str(data), out=str(tmp_path / "run"),
                      concepts=str(tmp_path / "concepts"), batch_size=4, accum_freq=2, steps=1, lr=1e-3, workers=0, shuffle=0,
                      min_concept_coverage=0.6)
    with pytest.raises(ValueError) as stop:
        train(cfg)
    said = re.fullmatch(r"c2lip: 4 of 8 captions of the first step have concepts it can use \(50\.0%\), from the concept store "
                        r".*, below --min-concept-coverage 0\.6; e\.g\. '(.*)' has none: run `compclip concepts` .*", str(stop.value))
    assert said and said.group(1) in uncovered, str(stop.value)
    cfg.min_concept_coverage = 0.5
    with caplog.at_level("WARNING", logger="compclip.train"):
        train(cfg)
    assert [m for m in caplog.messages if m.startswith("only")] == [f"only 50.0% of the captions have concepts, e.g. {said.group(1)!r}"]

def test_c2lip_without_a_concept_store_is_a_clear_error(tmp_path):
    from compclip.train import TrainConfig, Trainer

    data = make_dataset(tmp_path, n=8)
    with pytest.raises(ValueError, match="pass --concepts"):
        Trainer(TrainConfig(method="c2lip", model="compclip-tiny-siglip", train_data=str(data), out=str(tmp_path / "r"), workers=0))


@pytest.mark.parametrize("method", ["c2lip", "clic"])
def test_torchrun_compclip_train_end_to_end(tmp_path, capsys, method):
    """`torchrun -m compclip train` as the README shows it, two gloo processes on the CPU; CLIC too,
    whose frozen tower, unused logit bias and alternating steps DDP must accept."""
    data = make_dataset(tmp_path, n=32)
    env = env_for_children()
    assert run_main(capsys, "-q", "concepts", data, "--out", tmp_path / "concepts")[0] == 0
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           "-m", "compclip", "-q", "train", "--method", method, "--model", "compclip-tiny-siglip", "--train-data", str(data),
           "--concepts", str(tmp_path / "concepts"), "--out", str(tmp_path / "run"), "--steps", "4", "--batch-size", "4",
           "--accum-freq", "2", "--save-every", "2", "--workers", "1", "--lr", "1e-4", "--device", "cpu"]
    result = run_tree(cmd, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4]  # rank 0 logs, once per step
    if method == "clic":
        assert ["clip" in r for r in records] == [False, True, False, True]
    state = torch.load(tmp_path / "run" / "checkpoints" / "step_0000004" / "training_state.pt", weights_only=True)
    assert len(state["ranks"]) == 2 and state["step"] == 4
    # each rank read its own half of the records: positions advance on both
    assert all(r["data"]["positions"] for r in state["ranks"])
    assert {s for r in state["ranks"] for s in r["data"]["positions"]} == {0, 1}


def test_gradient_checkpointing_changes_nothing_but_memory(whole_batch, monkeypatch):
    from compclip import models

    original = models.load_model

    def checkpointed(*args, **kwargs):
        model, preprocess, tokenizer = original(*args, **kwargs)
        model.set_grad_checkpointing(True)
        return model, preprocess, tokenizer

    monkeypatch.setattr(models, "load_model", checkpointed)
    assert_same(dist_grads.compute(DistEnv()), whole_batch)


def test_eval_hook_and_tensorboard(tmp_path):
    from compclip.train import TrainConfig, train

    data = make_dataset(tmp_path, n=16)
    from compclip.concepts import build_store, iter_captions

    build_store(iter_captions(data), tmp_path / "concepts")
    calls = []

    def hook(model, step):
        calls.append((step, model.training))
        return {"probe": float(step)}

    cfg = TrainConfig(method="siglip", model="compclip-tiny-clip", train_data=str(data), out=str(tmp_path / "run"),
                      batch_size=8, steps=5, lr=1e-4, workers=0, eval_every=2, optimizer="adamw", weight_decay=0.1)
    train(cfg, eval_hook=hook)
    assert calls == [(2, False), (4, False), (5, False)]  # in eval mode, training resumes after; the last step, off the period, too
    records = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r.get("eval/probe") for r in records] == [None, 2.0, None, 4.0, 5.0]
    assert set(records[0]) >= {"siglip", "loss", "lr", "samples_per_second", "data_time", "scale", "epoch"}
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))



def test_each_step_logs_how_long_it_waited_for_its_batch(tmp_path):
    """`data_time` is the wait in `draw()` alone, open_clip_train's `Data (t)`: a draw held 0.3 s reads at least that,
    and the step's rate counts it; a draw that waits for nothing reads a small part of its step."""
    from compclip.train import TrainConfig
    from compclip.train.faults import NonFiniteGuard
    from compclip.train.loop import train_loop
    from compclip.train.trainer import Trainer

    data = make_dataset(tmp_path, n=16)
    trainer = Trainer(TrainConfig(method="clip", model="compclip-tiny-clip", train_data=str(data), out=str(tmp_path / "run"),
                                  batch_size=8, steps=3, workers=0))
    batches = trainer._batches()
    held = [next(batches) for _ in range(3)]
    batches.close()
    waits = iter([0.3, 0.0, 0.0])

    def draw():
        time.sleep(next(waits))
        return [held.pop()]

    records = []
    train_loop(trainer.state, range(3), draw, trainer.env, NonFiniteGuard(0, tmp_path), records.append)
    assert records[0]["data_time"] >= 0.3 and records[0]["samples_per_second"] <= 8 / 0.3
    assert all(r["data_time"] < 0.5 * 8 / r["samples_per_second"] for r in records[1:])  # under half of its step

# ---- the loop's settings, on the CPU -------------------------------------------------------------------------------


def settings_config(tmp_path, out, **changes):
    from compclip.train import TrainConfig

    data = tmp_path / "train.csv" if (tmp_path / "train.csv").is_file() else make_dataset(tmp_path, n=16)
    base = {"method": "siglip", "model": "compclip-tiny-siglip", "train_data": str(data), "out": str(tmp_path / out), "batch_size": 8,
            "steps": 4, "lr": 1e-3, "workers": 0}
    return TrainConfig(**{**base, **changes})


def logged(tmp_path, out, key):
    return {r["step"]: r[key] for r in map(json.loads, (tmp_path / out / "log.jsonl").read_text().splitlines())}


def test_a_runs_progress_line_names_its_method_and_its_folder(tmp_path, capsys, monkeypatch):
    """In a log the demo's runs are told apart (the base's three runs all train siglip; seeds differ by folder)."""
    from compclip import progress
    from compclip.train import train

    monkeypatch.setattr(progress, "QUIET_UNDER", 0.0)  # a bar done within seconds prints nothing otherwise
    monkeypatch.setattr(progress, "_QUIET", False)  # as an in-process `compclip --quiet` of another test may have left it
    train(settings_config(tmp_path, "base-singles", steps=2))
    assert any(line.startswith("train siglip (base-singles): 100%") for line in capsys.readouterr().err.splitlines())


def test_each_logged_step_writes_open_clip_trains_line_to_train_log_and_to_a_stderr_that_is_no_terminal(tmp_path, capsys):
    """What `tail -f` of a SLURM log shows: at every --log-every-n-steps step, open_clip_train's `Train Epoch: ... LR: ...
    Logit Scale: ... Loss: ...` line with that step's figures of log.jsonl, in OUT/train.log and on stderr (a file here)."""
    data = make_dataset(tmp_path, n=16)
    code, _, err = run_main(capsys, "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", data,
                            "--out", tmp_path / "run", "--steps", "5", "--batch-size", "8", "--lr", "1e-3", "--workers", "0",
                            "--log-every-n-steps", "2")
    assert code == 0, err
    records = {r["step"]: r for r in map(json.loads, (tmp_path / "run" / "log.jsonl").read_text().splitlines())}
    assert sorted(records) == [2, 4, 5]
    line = re.compile(r"Train Epoch: (\d+) \[(\d+)/5 \(\d+%\)\] Data \(t\): [\d.]+ Batch \(t\): ([\d.]+), ([\d.]+)/s, ([\d.]+)/s/gpu "
                      r"LR: ([\d.]+) Logit Scale: ([\d.]+) Loss: ([\d.]+) Siglip: ([\d.]+)$")
    for where in ((tmp_path / "run" / "train.log").read_text(), err):
        said = {int(m[2]): m for m in map(line.search, where.splitlines()) if m}
        assert sorted(said) == [2, 4, 5], where
        for step, m in said.items():
            r = records[step]
            assert int(m[1]) == r["epoch"] and float(m[6]) == pytest.approx(r["lr"], abs=1e-6)
            assert float(m[8]) == float(m[9]) == pytest.approx(r["loss"], rel=1e-4) and float(m[7]) == pytest.approx(r["scale"], abs=1e-3)
            assert float(m[4]) == float(m[5]) == pytest.approx(r["samples_per_second"], rel=1e-5)  # one process
            assert float(m[4]) == pytest.approx(8 / r["batch_time"], rel=1e-3)


def test_a_resumed_run_says_it_resumed_and_not_that_its_model_is_random(tmp_path, caplog, monkeypatch):
    """A bundled model is "initialised randomly" when a run starts, not when it resumes: its weights are the checkpoint's."""
    from compclip.models import factory
    from compclip.train import train

    train(settings_config(tmp_path, "resumed", steps=2, save_every=2))
    monkeypatch.setattr(factory, "_SAID_RANDOM", set())  # (said once a process: as a new process would)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="compclip"):
        train(settings_config(tmp_path, "resumed", steps=3, save_every=2))
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("resumed from ") and m.endswith(" at step 2") for m in said), said
    assert not [m for m in said if "initialised randomly" in m]
    monkeypatch.setattr(factory, "_SAID_RANDOM", set())
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="compclip"):
        train(settings_config(tmp_path, "new", steps=1))
    assert [r for r in caplog.records if "initialised randomly" in r.getMessage()]  # a new run's model is


def test_the_learning_rate_warms_up_then_follows_the_cosine(tmp_path):
    """open_clip's cosine_lr: base * (s + 1) / warmup during the warm-up, then ½ (1 + cos(π (s − w) / (steps − w))) base."""
    from compclip.train import train

    train(settings_config(tmp_path, "lr", steps=7, warmup=3))
    for step, lr in logged(tmp_path, "lr", "lr").items():  # the rate after `step` updates: the next step's
        expected = 1e-3 * (step + 1) / 3 if step < 3 else 0.5 * (1 + math.cos(math.pi * (step - 3) / (7 - 3))) * 1e-3
        assert lr == pytest.approx(expected, abs=1e-12), step


def test_weight_decay_leaves_gains_biases_and_the_logit_scale_alone(tmp_path):
    from compclip.train import Trainer

    trainer = Trainer(settings_config(tmp_path, "wd", weight_decay=0.1, optimizer="adamw"))
    decay = {id(p) for g in trainer.optimizer.param_groups if g["weight_decay"] == 0.1 for p in g["params"]}
    names = {n: id(p) in decay for n, p in trainer.model.named_parameters()}
    assert names["visual.trunk.blocks.0.attn.qkv.weight"] and not names["visual.trunk.blocks.0.attn.qkv.bias"]
    assert not names["logit_scale"] and not names["text.ln_final.weight"] and not names["visual.trunk.norm.weight"]
    assert names["text.token_embedding.weight"] and names["text.positional_embedding"]  # matrices are decayed, as open_clip
    assert all(decayed == (p.ndim >= 2 and not any(k in n for k in ("bias", "ln", "bn", "logit_scale")))
               for (n, decayed), p in zip(names.items(), trainer.model.parameters(), strict=True))


def test_the_logit_scale_is_clamped_to_100_after_every_step(tmp_path):
    from compclip.train import Trainer

    trainer = Trainer(settings_config(tmp_path, "clamp", steps=1))
    with torch.no_grad():
        trainer.model.logit_scale.fill_(math.log(1000.0))
    trainer.run()
    assert trainer.model.logit_scale.item() == pytest.approx(math.log(100.0))
    assert logged(tmp_path, "clamp", "scale")[1] == pytest.approx(100.0)


def test_keep_log_every_and_a_locked_text_tower(tmp_path):
    from compclip.train import train

    train(settings_config(tmp_path, "keep", steps=5, save_every=1, keep=2, log_every=2, lock_text=True))
    assert sorted(p.name for p in (tmp_path / "keep" / "checkpoints").glob("step_*")) == ["step_0000004", "step_0000005"]
    assert (tmp_path / "keep" / "checkpoints" / "latest").read_text() == "step_0000005"
    assert sorted(logged(tmp_path, "keep", "loss")) == [2, 4, 5]  # every second step, and the last
    before, _, _ = load_model("compclip-tiny-siglip")
    after, _, _ = load_model(str(tmp_path / "keep" / "checkpoints" / "step_0000005"))
    b, a = before.state_dict(), after.state_dict()
    assert all(torch.equal(b[k], a[k]) for k in b if k.startswith("text."))
    assert any(not torch.equal(b[k], a[k]) for k in b if k.startswith("visual."))


def test_a_locked_image_tower_can_leave_its_last_groups_trained(tmp_path):
    """open_clip's --lock-image-unlocked-groups on a timm ViT (timm's layer groups): 1 trains the attention-pool head
    alone, 2 the last block and the final norm too; nothing before them moves."""
    from compclip.train import train

    torch.manual_seed(0)  # the trainer's initialisation of a model from scratch
    before = load_model("compclip-tiny-siglip")[0].state_dict()
    for groups, trained in ((1, ("visual.trunk.attn_pool.",)),
                            (2, ("visual.trunk.attn_pool.", "visual.trunk.norm.", "visual.trunk.blocks.1."))):
        train(settings_config(tmp_path, f"g{groups}", steps=2, lock_image=True, lock_image_unlocked_groups=groups))
        after = load_model(str(tmp_path / f"g{groups}" / "checkpoints" / "step_0000002"))[0].state_dict()
        moved = {k for k in before if k.startswith("visual.") and k.endswith("weight") and not torch.equal(before[k], after[k])}
        assert moved == {k for k in before if k.startswith(trained) and k.endswith("weight")}, groups
    with pytest.raises(UsageError, match="--lock-image-unlocked-groups must be at least 0, not -1"):
        train(settings_config(tmp_path, "bad", lock_image=True, lock_image_unlocked_groups=-1))


def test_settings_that_cannot_learn_are_refused_before_a_step(tmp_path, caplog):
    """One image a step has no negative; both towers locked under a method without modules leave only the temperature
    to train: refused, naming the options, before any folder is written. A warm-up as long as the run is said once. The
    same locks under OC-CLIP, whose binding module trains, are accepted."""
    from compclip.errors import UsageError
    from compclip.train import Trainer

    with pytest.raises(UsageError, match=r"a step of 1 image \(--batch-size 1 on 1 process\(es\)\) has no negative"):
        Trainer(settings_config(tmp_path, "one", batch_size=1))
    with pytest.raises(UsageError, match="--lock-image and --lock-text freeze both towers, and method siglip owns no module"):
        Trainer(settings_config(tmp_path, "locked", lock_image=True, lock_text=True))
    assert not (tmp_path / "one").exists() and not (tmp_path / "locked").exists()
    with caplog.at_level("WARNING", logger="compclip.train"):
        Trainer(settings_config(tmp_path, "warm", warmup=4))
    assert caplog.messages == ["--warmup 4 is not shorter than the run's 4 steps: the learning rate never reaches --lr 0.001"]
    from compclip.concepts import build_store, iter_captions

    build_store(iter_captions(tmp_path / "train.csv"), tmp_path / "concepts", "graph")
    Trainer(settings_config(tmp_path, "module", method="occlip", concepts=str(tmp_path / "concepts"), lock_image=True, lock_text=True))


def test_one_image_a_micro_batch_accumulated_to_four_trains_as_a_batch_of_four(tmp_path, capsys):
    """`--batch-size 1 --accum-freq 4` is a step of four images, each with three negatives: accepted, and its steps
    are those of `--batch-size 4` (exact accumulation: the same losses, step by step); `--batch-size 1` alone, one image
    a step, is refused before a folder is written."""
    from conftest import run_main

    data = make_dataset(tmp_path, n=8)
    common = ["-q", "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", data, "--steps", "2",
              "--lr", "1e-3", "--workers", "0", "--shuffle", "0"]
    code, _, err = run_main(capsys, *common, "--out", tmp_path / "accumulated", "--batch-size", "1", "--accum-freq", "4")
    assert code == 0, err
    assert run_main(capsys, *common, "--out", tmp_path / "whole", "--batch-size", "4")[0] == 0
    accumulated, whole = losses(tmp_path / "accumulated"), losses(tmp_path / "whole")
    assert list(accumulated) == [1, 2] and list(accumulated.values()) == pytest.approx(list(whole.values()), rel=1e-5)
    code, _, err = run_main(capsys, *common, "--out", tmp_path / "one", "--batch-size", "1", "--accum-freq", "1")
    assert (code, err) == (2, "error: a step of 1 image (--batch-size 1 on 1 process(es)) has no negative to contrast with: "
                              "give at least 2\n")
    assert not (tmp_path / "one").exists()

def test_bf16_autocast_on_the_cpu_resumes_exactly(tmp_path):
    """amp_bf16 trains on a CPU, and a run stopped at step 2 and resumed gives steps 3-4 of the straight run."""
    from compclip.train import train

    straight = settings_config(tmp_path, "straight", precision="amp_bf16", schedule="const", save_every=2)
    train(straight)
    train(settings_config(tmp_path, "resumed", precision="amp_bf16", schedule="const", save_every=2, steps=2))
    train(settings_config(tmp_path, "resumed", precision="amp_bf16", schedule="const", save_every=2))
    a, b = logged(tmp_path, "straight", "loss"), logged(tmp_path, "resumed", "loss")
    assert sorted(b) == [1, 2, 3, 4] and [b[s] for s in (3, 4)] == pytest.approx([a[s] for s in (3, 4)], rel=1e-6)
    assert all(math.isfinite(v) for v in a.values()) and a[4] != a[1]


def test_c2lip_trains_in_open_clips_bf16_weights_close_to_fp32(tmp_path):
    """`--precision bf16` (open_clip's 16-bit weights, C2LIP's recipe): C2LIP's three terms, the cross-attention one
    through SigLIP's attention pool, train a step on the CPU; the checkpoint's weights are bf16, the first step's terms
    within bf16's precision of fp32's, and the second step's differ from the first (the step really trained)."""
    from safetensors.torch import load_file

    from compclip.concepts import build_store, iter_captions
    from compclip.train import train

    data = make_dataset(tmp_path, n=16)
    build_store(iter_captions(data), tmp_path / "concepts")
    for precision in ("fp32", "bf16"):
        train(settings_config(tmp_path, precision, method="c2lip", concepts=str(tmp_path / "concepts"), precision=precision,
                              steps=2, save_every=2, min_concept_coverage=0.0))
    weights = load_file(tmp_path / "bf16" / "checkpoints" / "step_0000002" / "model.safetensors")
    assert {t.dtype for k, t in weights.items() if "visual.trunk.blocks" in k} == {torch.bfloat16}
    first = {p: [logged(tmp_path, p, term)[1] for term in ("siglip", "npc", "xac")] for p in ("fp32", "bf16")}
    assert first["bf16"] == pytest.approx(first["fp32"], rel=0.03) and first["bf16"] != first["fp32"] and min(first["bf16"]) > 0
    assert logged(tmp_path, "bf16", "loss")[2] != logged(tmp_path, "bf16", "loss")[1]


def test_fp16_autocast_on_the_cpu_scales_its_loss_as_on_a_gpu(tmp_path):
    """amp is fp16 autocast with loss scaling (open_clip_train's): on the CPU too, where torch's default GradScaler, CUDA's,
    turns itself off with a warning and fp16 trains unscaled. The checkpoint keeps the scaler's state."""
    from compclip.train import Trainer

    trainer = Trainer(settings_config(tmp_path, "amp", precision="amp", steps=2, save_every=2))
    assert trainer.scaler.is_enabled() and trainer.scaler.get_scale() == 65536.0
    trainer.run()
    state = torch.load(tmp_path / "amp" / "checkpoints" / "step_0000002" / "training_state.pt", weights_only=False)
    assert state["scaler"]["scale"] > 0 and math.isfinite(logged(tmp_path, "amp", "loss")[2])


def test_resume_restores_every_generator_to_its_saved_state(tmp_path):
    """torch's, numpy's and Python's generators after a resume are the ones the checkpoint saved, not the seed's: a term
    that draws from them (a method's dropout, a random crop in the main process) continues as the run would have."""
    import random as pyrandom

    import numpy as np

    from compclip.models.checkpoint import STATE_NAME
    from compclip.train import Trainer, train

    train(settings_config(tmp_path, "rng", steps=2, schedule="const"))
    saved = torch.load(tmp_path / "rng" / "checkpoints" / "step_0000002" / STATE_NAME, weights_only=True)["ranks"][0]["rng"]
    torch.manual_seed(123), np.random.seed(123), pyrandom.seed(123)  # anything else in between
    resumed = Trainer(settings_config(tmp_path, "rng", steps=4, schedule="const"))
    assert resumed.step == 2
    assert torch.equal(torch.get_rng_state(), saved["torch"])
    kind, keys, *rest = np.random.get_state()
    assert kind == saved["numpy"][0] and np.array_equal(keys, saved["numpy"][1].numpy()) and list(rest) == list(saved["numpy"][2:])
    assert pyrandom.getstate() == tuple(tuple(x) if isinstance(x, list) else x for x in saved["python"])
    assert not torch.equal(saved["torch"], torch.random.manual_seed(0).get_state())  # the saved state is not the seed's


def test_a_seed_of_ten_or_more_trains(tmp_path, capsys):
    """Each sample's generator is seeded from the run's seed, epoch, shard and place: at --seed 10 that number passed 2**63
    and torch refused it (C2LIP's recipe trains at the authors' seed, 42)."""
    from conftest import run_main

    data = make_dataset(tmp_path, n=8)
    code, _, err = run_main(capsys, "-q", "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--batch-size", "8",
                            "--workers", "0", "--steps", "1", "--seed", "42", "--train-data", str(data), "--out", str(tmp_path / "run"))
    assert code == 0, err[-2000:]


def test_a_run_folder_latest_best_and_a_step_are_one_notion_of_a_checkpoint(tmp_path, swap_root, capsys, caplog):
    """What `export` took and `eval` refused: the run folder, its `checkpoints` folder and `checkpoints/latest` (a text
    pointer) all mean the newest step, said; `checkpoints/best` and a step folder are themselves. The same weights through
    `load_model`, `eval` and `export`."""
    import logging

    import torch

    from compclip.models import load_model
    from conftest import run_main

    train_run = settings_config(tmp_path, "run", steps=2, save_every=1, keep=2, val_data=str(tmp_path / "train.csv"), eval_every=1,
                                keep_best="val/clip_val_loss")
    from compclip.train import train

    train(train_run)
    run, step = tmp_path / "run", tmp_path / "run" / "checkpoints" / "step_0000002"
    reference = load_model(step)[0].state_dict()
    with caplog.at_level(logging.INFO, logger="compclip.models"):
        for given in (run, run / "checkpoints", run / "checkpoints" / "latest", str(run)):
            weights = load_model(given)[0].state_dict()
            assert all(torch.equal(weights[k], reference[k]) for k in reference), given
    assert f"{run}: the run's newest checkpoint, {step}" in caplog.text
    best = json.loads((run / "checkpoints" / "best" / "best.json").read_text())
    assert load_model(run / "checkpoints" / "best")[0] is not None and best["step"] in (1, 2)
    for given in (run, run / "checkpoints" / "latest"):
        out = tmp_path / f"eval-{given.name}"
        code, _, err = run_main(capsys, "eval", "--model", given, "--benchmark", "sugarcrepe/swap_att", "--data-root", swap_root,
                                "--out", out, "--workers", "0", "--device", "cpu")
        assert code in (0, None), err
        assert json.loads((out / "sugarcrepe-swap_att.json").read_text())["metrics"]["swap_att"]["n"] > 0
    code, _, err = run_main(capsys, "export", run / "checkpoints" / "latest", tmp_path / "exported")
    assert code in (0, None), err
    from compclip.eval import load_scorer

    assert load_scorer(str(run)).model is not None  # the library's own door: the same rule


@pytest.fixture(scope="module")
def three_steps(tmp_path_factory):
    """A run of three whole checkpoints (steps 1, 2 and 3; `checkpoints/latest` names step 3): each test damages a copy."""
    from compclip.train import train

    root = tmp_path_factory.mktemp("three-steps")
    train(settings_config(root, "run", steps=3, save_every=1, keep=3))
    return root / "run"


def copy_of(run: Path, tmp_path: Path) -> Path:
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


@pytest.mark.parametrize("pointer", ["gone", "empty", "missing"])
def test_a_stale_empty_or_missing_latest_means_the_newest_whole_checkpoint_said(three_steps, tmp_path, capsys, caplog, pointer):
    """`checkpoints/latest` naming a step removed by hand was "unknown model ... open_clip.list_models()"; an empty one
    made a run of whole checkpoints unloadable ("no config.json"), a missing one "config.json: missing keys". Each means
    the newest whole step there, said in one line, through the run folder, its checkpoints folder and `compclip export`."""
    from safetensors.torch import load_file

    run = copy_of(three_steps, tmp_path)
    checkpoints, latest = run / "checkpoints", run / "checkpoints" / "latest"
    newest = checkpoints / ("step_0000002" if pointer == "gone" else "step_0000003")
    if pointer == "gone":
        shutil.rmtree(checkpoints / "step_0000003")
        said = f"{latest} names step_0000003, which is gone"
    elif pointer == "empty":
        latest.write_text("")
        said = f"{latest} is empty"
    else:
        latest.unlink()
        said = f"{checkpoints} has no latest pointer"
    said += f": loading the newest whole checkpoint, {newest}"
    reference = load_model(newest)[0].state_dict()
    assert not torch.equal(reference["logit_scale"], load_model(checkpoints / "step_0000001")[0].state_dict()["logit_scale"])
    for given in [run, checkpoints] + ([latest] if latest.exists() else []):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="compclip.models"):
            weights = load_model(given)[0].state_dict()
        assert all(torch.equal(weights[k], reference[k]) for k in reference), given
        assert [r.getMessage() for r in caplog.records] == [said], given
    code, _, err = run_main(capsys, "export", run, tmp_path / "exported.safetensors")
    assert code in (0, None) and said in err, err
    exported = load_file(tmp_path / "exported.safetensors")
    assert all(torch.equal(exported[k], reference[k]) for k in reference)


def test_a_run_folder_with_no_checkpoint_yet_says_so(three_steps, tmp_path, capsys):
    """It said "config.json: missing keys" (the run's own record read as a checkpoint's)."""
    run = copy_of(three_steps, tmp_path)
    shutil.rmtree(run / "checkpoints")  # as a run stopped before its first save leaves its folder
    said = f"{run}: a run folder with no checkpoint yet (training has not saved one)"
    code, _, err = run_main(capsys, "export", run, tmp_path / "exported.safetensors")
    assert code == 2 and [line for line in err.splitlines() if line.startswith("error: ")] == [f"error: {said}"], err
    with pytest.raises(MissingFileError, match=re.escape(said)):
        load_model(run)


def resumed(capsys, three_steps: Path, run: Path) -> tuple[int, str, str]:
    """`compclip train` of `three_steps`'s options on its copy `run`: a resume."""
    return run_main(capsys, "-q", "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data",
                    three_steps.parent / "train.csv", "--out", run, "--batch-size", "8", "--steps", "3", "--lr", "1e-3", "--workers",
                    "0", "--save-every", "1", "--keep", "3")


def test_a_damaged_newest_checkpoint_offers_the_newest_whole_one_before_it(three_steps, tmp_path, capsys):
    """Not the oldest: of steps 1 and 2, both whole, the resume is offered step 2."""
    run = copy_of(three_steps, tmp_path)
    state = run / "checkpoints" / "step_0000003" / "training_state.pt"
    state.write_bytes(state.read_bytes()[:100])
    code, _, err = resumed(capsys, three_steps, run)
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 2 and len(lines) == 1, err
    assert f"{state}: damaged, cannot resume" in lines[0]
    assert f"the previous checkpoint {run / 'checkpoints' / 'step_0000002'} is complete" in lines[0], lines[0]


def test_a_resume_past_a_newest_step_removed_by_hand_goes_on_from_the_newest_whole_one(three_steps, tmp_path, capsys):
    """It stopped with "step_0000003/config.json: not a compclip checkpoint folder": the run goes on from step 2, said,
    and logs step 3's loss as the run never interrupted logged it."""
    run = copy_of(three_steps, tmp_path)
    shutil.rmtree(run / "checkpoints" / "step_0000003")
    code, _, err = resumed(capsys, three_steps, run)
    assert code in (0, None), err
    assert (f"{run / 'checkpoints' / 'latest'} names step_0000003, which is gone: loading the newest whole checkpoint, "
            f"{run / 'checkpoints' / 'step_0000002'}") in err
    assert logged(tmp_path, "run", "siglip") == pytest.approx(logged(three_steps.parent, "run", "siglip"), rel=1e-6)
    assert (run / "checkpoints" / "latest").read_text() == "step_0000003"


def test_more_steps_on_resume_extend_a_finished_run_and_fewer_are_refused(tmp_path, capsys):
    """open_clip_train resumes with more epochs: `--steps 5` on a finished 3-step run trains steps 4 and 5, its cosine
    stretched to the new end (each step's rate the 5-step schedule's), said in one line and recorded in config.json;
    fewer steps, or other options, are still another run."""
    from conftest import run_main

    data = make_dataset(tmp_path, n=16)
    args = ["train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", data, "--out", tmp_path / "run",
            "--batch-size", "8", "--workers", "0", "--lr", "1e-3", "--save-every", "1"]
    assert run_main(capsys, *args, "--steps", "3")[0] == 0
    code, _, err = run_main(capsys, *args, "--steps", "5")
    assert code == 0, err
    assert "extending" in err and "from 3 to 5 steps at step 3: the cosine schedule now ends at step 5" in err
    rates = logged(tmp_path, "run", "lr")
    assert sorted(rates) == [1, 2, 3, 4, 5]
    for step in (4, 5):  # the rate after `step` updates, of the 5-step cosine
        assert rates[step] == pytest.approx(0.5 * (1 + math.cos(math.pi * step / 5)) * 1e-3, abs=1e-12), step
    record = json.loads((tmp_path / "run" / "config.json").read_text())
    assert record["steps"] == 5 and record["extended"] == [{"at_step": 3, "steps": [3, 5]}]
    code, out, err = run_main(capsys, *args, "--steps", "5")  # the same length again: finished, nothing extended
    assert code == 0 and out.startswith("nothing to train") and "extending" not in err, err
    code, _, err = run_main(capsys, *args, "--steps", "4")
    assert code == 2 and "holds a run made with other options (steps 5 -> 4)" in err, err
    code, _, err = run_main(capsys, *args, "--steps", "6", "--lr", "2e-3")
    assert code == 2 and "lr 0.001 -> 0.002" in err and "steps" not in err.split("(")[1].split(")")[0], err


def test_seeds_train_one_run_each_into_its_own_folder(tmp_path, capsys):
    """A paper's mean over seeds (OC-CLIP's three): `--seeds 0,1` trains two runs, OUT/seed-0 and OUT/seed-1, each its own
    run (its seed in config.json, other weights); run again, each has finished. Refused where it cannot work."""
    from safetensors.torch import load_file

    from conftest import run_main

    data = make_dataset(tmp_path, n=16)
    args = ["train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", data, "--out", tmp_path / "run",
            "--batch-size", "8", "--workers", "0", "--epochs", "1", "--seeds", "0,1"]
    code, out, err = run_main(capsys, *args)
    assert code == 0, err  # an epoch of 16 at 8 a step: the run's own count said, not the option's default
    assert "seed 0: finished 2 steps into" in out and "seed 1: finished 2 steps into" in out and "2 runs under" in out
    for seed in (0, 1):
        assert json.loads((tmp_path / "run" / f"seed-{seed}" / "config.json").read_text())["seed"] == seed
    weights = [load_file(tmp_path / "run" / f"seed-{s}" / "checkpoints" / "step_0000002" / "model.safetensors") for s in (0, 1)]
    assert not torch.equal(weights[0]["text.token_embedding.weight"], weights[1]["text.token_embedding.weight"])  # seeded apart
    code, out, _ = run_main(capsys, *args)
    assert code == 0 and "seed 0: " in out and "had finished" in out
    code, _, err = run_main(capsys, *args[:-1], "0,x")
    assert code == 2 and "--seeds 0,x: give comma-separated whole numbers" in err


def test_a_stop_signal_is_said_when_it_arrives_not_when_the_step_ends(tmp_path):
    """A step of 16 micro-batches lasts a second or more on the tiny model. SIGTERM sent while step 2 runs (its data drawn: the
    epochs its micro-batches end, logged after step 1's line) is said at once, in one line before step 2's own line, naming
    the step the run finishes; the run then stops at that step's boundary as before, with a checkpoint and the
    `preempted:` line of the same step."""
    data = make_dataset(tmp_path, n=16)
    cmd = [sys.executable, "-m", "compclip", "train", "--method", "clip", "--model", "compclip-tiny-clip", "--train-data", str(data),
           "--out", str(tmp_path / "run"), "--steps", "3", "--batch-size", "8", "--accum-freq", "16", "--workers", "0",
           "--save-every", "1000"]
    lines, stage = [], "step 1"
    with subprocess.Popen(cmd, env=env_for_children(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if stage == "step 1" and "Train Epoch: " in line and "[1/3 " in line:
                stage = "step 2"
            elif stage == "step 2" and "read 16 samples, skipped none" in line:
                proc.send_signal(signal.SIGTERM)
                stage = "sent"
        proc.wait(timeout=120)
    err = "\n".join(lines)
    assert proc.returncode == 75, err[-3000:]
    said = [i for i, line in enumerate(lines) if line.startswith("stop signal ")]
    assert [lines[i] for i in said] == ["stop signal SIGTERM received: finishing step 2, then saving"], err[-3000:]
    step_2 = next(i for i, line in enumerate(lines) if "Train Epoch: " in line and "[2/3 " in line)
    assert said[0] < step_2, err[-3000:]
    assert lines[-1] == (f"preempted: SIGTERM at step 2 of 3: checkpoint {tmp_path / 'run' / 'checkpoints' / 'step_0000002'} written; "
                         "run the same command to resume")
