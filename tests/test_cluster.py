"""What a shared cluster does to a run: group-shared folders under a umask, checkpoint rotation beside the user's own
files. Each case asserts what is on disk afterwards."""
import contextlib
import errno
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from compclip.io import atomic_dir, atomic_path, write_json
from conftest import run_main, run_tree


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
            (tmp / "sub").mkdir(mode=0o700)  # as mkdtemp and mkstemp make them: private until written out
            os.close(tempfile.mkstemp(dir=tmp / "sub", prefix="deep")[0])
        model, _, _ = load_model("compclip-tiny-clip")
        save_checkpoint(model, tmp_path / "ckpt", state={"step": 1})
        export(tmp_path / "ckpt", str(tmp_path / "export"), "open_clip")
        (tmp_path / "plain.txt").write_text("z")
        (tmp_path / "plain").mkdir()
    file_mode, folder_mode = mode(tmp_path / "plain.txt"), mode(tmp_path / "plain")
    assert file_mode == 0o666 & ~mask and folder_mode == 0o777 & ~mask
    written = [*(tmp_path / "ckpt").iterdir(), *(tmp_path / "export").iterdir()]
    deep = next((tmp_path / "folder" / "sub").iterdir())
    for path in (tmp_path / "result.json", tmp_path / "report.md", tmp_path / "folder" / "inside.txt", deep, *written):
        assert mode(path) == file_mode, path
    for path in (tmp_path / "folder", tmp_path / "folder" / "sub", tmp_path / "ckpt", tmp_path / "export"):
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


def test_a_checkpoint_is_on_disk_before_its_folder_is_renamed_into_place(tmp_path, monkeypatch):
    """A power loss right after a checkpoint leaves the previous one or this one whole, never a folder named but empty:
    every file the trainer writes (the weights and training state that safetensors and torch.save leave unsynced, the
    JSON files) and the folder itself reach `fsync` before the rename that names the folder, and its parent after it.
    `os.fsync` and `os.replace` are wrapped only to record what they were called on."""
    from compclip.train import train
    from test_train import settings_config

    calls = []
    fsync, replace = os.fsync, os.replace

    def recorded_fsync(fd):
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def recorded_replace(src, dst, **kwargs):
        calls.append(("replace", str(src), str(dst)))
        replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "fsync", recorded_fsync)
    monkeypatch.setattr(os, "replace", recorded_replace)
    train(settings_config(tmp_path, "run", steps=2, save_every=2, schedule="const"))
    folder = tmp_path / "run" / "checkpoints" / "step_0000002"
    named = next(i for i, call in enumerate(calls) if call[0] == "replace" and call[2] == str(folder))
    tmp = Path(calls[named][1])
    synced = {Path(call[1]) for call in calls[:named] if call[0] == "fsync"}
    files = sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())
    assert {"model.safetensors", "training_state.pt", "config.json"} <= {f.name for f in files}
    assert [f for f in files if tmp / f not in synced] == [] and tmp in synced
    assert ("fsync", str(folder.parent)) in calls[named + 1:]


# Run in its own interpreter: an audit hook (PEP 578) stays for the life of the process. At each step a folder write
# takes in the folder's parent once its contents are written (each file opened, renamed or removed there), the hook
# reads the folder as a reader would, and at the step numbered `write_at` a second writer of the same folder writes it
# whole, as a second process's write landing there would.
SWAP_WATCHED = r"""
import json, sys
from pathlib import Path
from compclip.io import atomic_dir

target, write_at = Path(sys.argv[1]), int(sys.argv[2])
seen, state = [], {"calls": 0, "inside": False, "committing": False}

def write(version):
    with atomic_dir(target) as tmp:
        for k in range(3):
            (tmp / f"part{k}.txt").write_text(version)
        state["committing"] = state["committing"] or version == "first"

def read():
    parts = sorted(target.glob("part*.txt")) if target.is_dir() else []
    versions = {p.read_text() for p in parts}
    return versions.pop() if len(parts) == 3 and len(versions) == 1 else f"{len(parts)} parts {sorted(versions)}"

def hook(event, args):
    if state["inside"] or not state["committing"] or event not in ("open", "os.rename", "os.remove", "os.rmdir", "shutil.rmtree"):
        return
    if not any(isinstance(a, (str, Path)) and str(a).startswith(str(target.parent)) for a in args):
        return
    state["inside"] = True
    seen.append(read())
    if state["calls"] == write_at:
        write("second")
    state["calls"] += 1
    state["inside"] = False

write("old")
sys.addaudithook(hook)
write("first")
state["committing"] = False
print(json.dumps({"seen": seen, "after": read(), "calls": state["calls"],
                  "left": sorted(p.name for p in target.parent.iterdir() if p != target)}))
"""


def test_a_folder_rewritten_is_always_there_whole_and_a_second_writer_meeting_it_mid_swap_wins(tmp_path):
    """A reader of a folder being written again (a checkpoint, an export) finds the old one or the new one, whole, at
    every step of the swap, never no folder; a second writer whose write lands between any two steps of the first leaves
    one of the two whole folders and no temporary sibling, and neither write fails."""
    landed = 0
    while True:
        target = tmp_path / str(landed) / "best"
        done = subprocess.run([sys.executable, "-c", SWAP_WATCHED, str(target), str(landed)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        report = json.loads(done.stdout)
        assert set(report["seen"]) <= {"old", "first", "second"}, report["seen"]
        assert report["after"] in ("first", "second") and report["left"] == [], report
        if report["calls"] <= landed + 1:  # the second writer landed before the first's last step: every step is met
            break
        landed += 1
    assert report["calls"] > landed  # it did land mid-swap


def retrieval_data(root):
    """A data root with one small retrieval set: four coloured squares and their captions."""
    from PIL import Image

    folder = root / "retrieval" / "tiny"
    folder.mkdir(parents=True)
    rows = []
    for k, (name, colour) in enumerate([("red", (220, 30, 30)), ("green", (30, 200, 40)), ("blue", (30, 40, 220)), ("grey", (128,) * 3)]):
        Image.new("RGB", (48, 40), colour).save(folder / f"{k}.png")
        rows.append(f"{k}.png,a {name} square")
    (folder / "captions.csv").write_text("image,caption\n" + "\n".join(rows) + "\n")
    return root


def test_two_models_evaluated_into_one_folder_are_refused_not_replaced(tmp_path, capsys):
    """The second model's eval into the first's --out is refused in one line naming the file and its model, before
    anything loads; the folder keeps the first's results. The same model again, or --force, writes."""
    import json

    import torch

    from compclip.models import load_model, save_checkpoint
    from conftest import run_main

    for seed, name in ((0, "a"), (1, "b")):
        torch.manual_seed(seed)
        save_checkpoint(load_model("compclip-tiny-clip", init_seed=None)[0], tmp_path / name)
    retrieval_data(tmp_path / "data")
    run = lambda model, *more: run_main(capsys, "eval", "--model", tmp_path / model, "--benchmark", "retrieval",  # noqa: E731
                                        "--data-root", tmp_path / "data", "--out", tmp_path / "out", "--workers", "0", *more)
    assert run("a")[0] == 0
    first = json.loads((tmp_path / "out" / "retrieval.json").read_text())
    code, _, err = run("b")
    assert code == 2 and err == (f"error: --out {tmp_path / 'out'} holds results of another model: retrieval.json is {tmp_path / 'a'}'s; "
                                 "give each model its own --out (`compclip report` compares folders), or --force to replace them\n")
    assert json.loads((tmp_path / "out" / "retrieval.json").read_text()) == first
    assert run("a")[0] == 0  # the same weights again: its own results, rewritten
    assert run("b", "--force")[0] == 0
    assert json.loads((tmp_path / "out" / "retrieval.json").read_text())["weights_sha256"] != first["weights_sha256"]


def test_the_eval_cache_misses_when_the_checkpoints_preprocessing_changes(tmp_path, capsys):
    """The reported case: the same weights with another mean and std in config.json and open_clip_config.json must be
    encoded again; the cached run's numbers equal an uncached run's of the edited checkpoint."""
    import json

    from compclip.models import load_model, save_checkpoint
    from conftest import run_main

    model, _, _ = load_model("compclip-tiny-clip")
    save_checkpoint(model, tmp_path / "ckpt")
    retrieval_data(tmp_path / "data")

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


def test_a_resume_compares_the_files_its_paths_name_not_the_strings(tmp_path, monkeypatch):
    """The same CSV by its absolute path resumes; the same relative string from another folder names another CSV and is
    refused, and so is the same path to a file that changed since (its size). config.json records the paths resolved."""
    import json

    from compclip.errors import UsageError
    from compclip.train import TrainConfig, Trainer, train
    from test_train import make_dataset

    for side in ("a", "b"):
        make_dataset(tmp_path / side, n=16)
    common = {"method": "siglip", "model": "compclip-tiny-siglip", "out": str(tmp_path / "run"), "batch_size": 8, "lr": 1e-3,
              "workers": 0, "schedule": "const"}
    monkeypatch.chdir(tmp_path / "a")
    train(TrainConfig(train_data="train.csv", steps=2, **common))
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())["train_data"]
    assert recorded == str(tmp_path / "a" / "train.csv")
    assert Trainer(TrainConfig(train_data=str(tmp_path / "a" / "train.csv"), steps=4, **common)).step == 2
    monkeypatch.chdir(tmp_path / "b")
    was, now = tmp_path / "a" / "train.csv", tmp_path / "b" / "train.csv"
    with pytest.raises(UsageError, match=rf"other options \(train_data '{was}' -> '{now}'\)"):
        Trainer(TrainConfig(train_data="train.csv", steps=4, **common))
    before = was.stat().st_size
    was.write_text(was.read_text() + was.read_text().splitlines()[1] + "\n")  # the same path, a row more: another run's data
    with pytest.raises(UsageError, match=rf"other options \(--train-data {was} names other files now \(1 file of {before:,} bytes "
                                         rf"then, 1 file of {was.stat().st_size:,} bytes now\)\)"):
        Trainer(TrainConfig(train_data=str(was), steps=4, **common))


def wait_for_steps(log, steps, proc, timeout=120):
    import time

    start = time.time()
    while time.time() - start < timeout:
        if log.is_file() and len(log.read_text().splitlines()) >= steps:
            return
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before step {steps}: {proc.stderr.read()[-2000:]}")
        time.sleep(0.05)
    raise AssertionError(f"no step {steps} within {timeout} s")


def test_a_preempted_run_checkpoints_at_the_next_step_and_resumes_exactly(tmp_path, capsys):
    """SLURM's --signal=USR1@120 and scancel's SIGTERM reach the whole process group, DataLoader workers included: the run
    writes a checkpoint at the next step boundary, says so in one line, exits 75 (EX_TEMPFAIL), and the same command
    resumes it to the same losses as a run never stopped. (The stopped runs are processes of their own; the run never
    stopped and the resumes go through compclip's entry point in this process.)"""
    import json
    import signal
    import subprocess

    from test_train import compclip, env_for_children, losses, make_dataset

    data = make_dataset(tmp_path, n=32)
    cmd = lambda out: compclip("train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", str(data),  # noqa: E731
                               "--out", str(tmp_path / out), "--steps", "40", "--batch-size", "8", "--lr", "1e-3",
                               "--save-every", "1000", "--workers", "2", "--log-every", "1")
    code, _, err = run_main(capsys, *cmd("straight")[3:])
    assert code == 0, err[-2000:]
    for sig in ("SIGTERM", "SIGUSR1"):
        proc = subprocess.Popen(cmd(sig), env=env_for_children(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        wait_for_steps(tmp_path / sig / "log.jsonl", 3, proc)
        os.killpg(proc.pid, getattr(signal, sig))  # the whole group, as the cluster does
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 75, err[-2000:]
        last = err.strip().splitlines()[-1]
        step = int(last.split(" at step ")[1].split()[0])
        assert last == (f"preempted: {sig} at step {step} of 40: checkpoint {tmp_path / sig / 'checkpoints' / f'step_{step:07d}'} "
                        "written; run the same command to resume") and "Traceback" not in err
        assert (tmp_path / sig / "checkpoints" / "latest").read_text() == f"step_{step:07d}" and 3 <= step < 40
        code, _, err = run_main(capsys, *cmd(sig)[3:])
        assert code == 0, err[-2000:]
        assert losses(tmp_path / sig) == pytest.approx(losses(tmp_path / "straight"), rel=1e-6), sig
        assert json.loads((tmp_path / sig / "log.jsonl").read_text().splitlines()[-1])["step"] == 40


def children(pid):
    """The processes `pid` started (Linux's /proc)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(c) for c in f.read().split()]
    return found


def wait_until(ready, proc, timeout=120):
    import time

    start = time.time()
    while not ready():
        if proc.poll() is not None or time.time() - start > timeout:
            raise AssertionError(f"the command ended or stalled first: {proc.returncode}, {proc.stderr.read()[-2000:]}")
        time.sleep(0.01)


def test_a_stopped_world_or_eval_ends_in_one_line_keeping_what_it_finished(tmp_path, capsys):
    """A cluster's stop to the whole process group, pool and DataLoader workers included: `world generate` (SIGTERM, while
    its training images are being written) and `eval` (SIGUSR1, while a later benchmark's images load) end in one
    `stopped:` line, exit 128 + the signal's number, leave no temporary file and keep every result they finished; the same
    commands then finish, to the same figures (run through compclip's entry point in this process)."""
    import json
    import signal
    import subprocess

    from test_train import compclip, env_for_children

    world = tmp_path / "world"
    make = compclip("-q", "world", "generate", "--out", str(world), "--n-train", "3000", "--n-test", "300", "--size", "64")
    proc = subprocess.Popen(make, env=env_for_children(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    wait_until(lambda: any(world.rglob(".*.tmp")), proc)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert err.strip().splitlines() == ["stopped: SIGTERM: the files it finished are kept, and no half-written file is left; "
                                        "run the same command again to finish"]
    assert not any(world.rglob("*.tmp")) and not (world / "manifest.json").exists()
    assert run_main(capsys, *make[3:])[0] == 0

    out = tmp_path / "results"
    evaluate = compclip("-q", "eval", "--model", "compclip-tiny-clip", "--benchmark", "sugarcrepe,zeroshot,retrieval",
                        "--data-root", str(world / "test_unseen"), "--out", str(out), "--workers", "2")
    proc = subprocess.Popen(evaluate, env=env_for_children(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    wait_until(lambda: (out / "sugarcrepe.json").is_file() and children(proc.pid), proc)
    os.killpg(proc.pid, signal.SIGUSR1)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGUSR1, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("stopped: SIGUSR1: the files it finished are kept") and "Traceback" not in err
    assert "Exception ignored" not in err and not any(out.rglob("*.tmp")) and not (out / "retrieval.json").exists()
    finished = json.loads((out / "sugarcrepe.json").read_text())
    assert run_main(capsys, *evaluate[3:])[0] == 0
    assert json.loads((out / "sugarcrepe.json").read_text())["metrics"] == finished["metrics"]
    assert json.loads((out / "retrieval.json").read_text())["metrics"]


def test_pool_workers_die_of_a_stop_and_with_their_command(tmp_path):
    """Two hangs of a pool's workers. A Python handler runs only between bytecodes: a SIGTERM from `Pool.terminate` that
    reached a worker just as it blocked on the queue lock (which terminate holds) was never run, and `concepts` waited in
    terminate's join forever; compclip's pools reset the stop signals in each worker, so one blocked on that lock dies of
    the signal. And a worker blocked on a lock whose holder a stop killed outlived its command, keeping its output pipe
    open (a caller reading it to the end waited forever); the kernel now ends it with the command."""
    import subprocess
    import sys

    from test_train import env_for_children

    blocked = """
import os, signal, sys, tempfile, time
from compclip import stops
def dispositions(_):
    return str([signal.getsignal(s) for s in sorted(stops.SIGNALS)])
def nap(marker):
    open(marker, "w").close()  # taken: this worker has let go of the queue's lock
    time.sleep(1.0)
stops.answer()
pool = stops.pool(2)
print(*sorted(set(pool.map(dispositions, range(8)))))
folder = tempfile.mkdtemp()
markers = [os.path.join(folder, str(i)) for i in range(2)]
busy = pool.map_async(nap, markers, chunksize=1)  # each worker takes one and lets go of the queue's lock
while not all(os.path.exists(m) for m in markers):  # however loaded the machine, both have taken theirs
    time.sleep(0.01)
lock, worker = pool._inqueue._rlock, pool._pool[0]
lock.acquire()  # as terminate does, or a worker killed while it waited for a task: both workers, done, wait on it
busy.wait()
time.sleep(0.3)
if sys.argv[1] == "terminate":
    os.kill(worker.pid, signal.SIGTERM)
    worker.join(10)
    print(worker.exitcode == -signal.SIGTERM)  # killed by the signal, not ended by a handler
    lock.release()
    pool.terminate()
print("ended", flush=True)
os._exit(0)  # as a stopped command leaves: past the pool's finaliser
"""
    run = lambda how: subprocess.run([sys.executable, "-c", blocked, how], env=env_for_children(), capture_output=True, text=True,  # noqa: E731
                                     timeout=60)  # capture_output reads to the end: until every worker has let go of the pipe
    result = run("terminate")
    assert result.stdout.split("\n")[:3] == ["[<Handlers.SIG_DFL: 0>, <Handlers.SIG_DFL: 0>]", "True", "ended"], result.stderr[-2000:]
    result = run("leave")
    assert result.returncode == 0 and result.stdout.split("\n")[1] == "ended", result.stderr[-2000:]


def test_a_preempted_torchrun_stops_every_rank_at_one_step_and_resumes_exactly(tmp_path):
    """Two processes under torchrun: SIGTERM to torchrun (which passes it on), or SIGUSR1 to one rank alone (srun delivers
    a job's --signal to each task; here it reached one, as when one node got it first). Both ranks stop after the same
    step with one checkpoint of both, and the same command resumes to the losses of a run never stopped. (SIGUSR1 to
    every rank, tested before, stops them as one rank's does: the ranks agree on any rank's signal.)"""
    import signal
    import subprocess
    import sys

    import torch

    from test_train import env_for_children, free_port, losses, make_dataset

    data = make_dataset(tmp_path, n=32)

    def cmd(out):
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
                "-m", "compclip", "-q", "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", str(data),
                "--out", str(tmp_path / out), "--steps", "30", "--batch-size", "4", "--save-every", "1000", "--workers", "1",
                "--lr", "1e-3", "--device", "cpu"]

    straight = run_tree(cmd("straight"), env=env_for_children(), timeout=300)
    assert straight.returncode == 0, straight.stderr[-2000:]
    for sig, to in (("SIGTERM", "torchrun"), ("SIGUSR1", "one")):
        proc = subprocess.Popen(cmd(to), env=env_for_children(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for_steps(tmp_path / to / "log.jsonl", 3, proc)
        targets = [proc.pid] if to == "torchrun" else children(proc.pid)
        assert len(targets) == (1 if to == "torchrun" else 2)
        for pid in targets[-1:]:  # torchrun, or the last rank alone (not the one that logs)
            os.kill(pid, getattr(signal, sig))
        _, err = proc.communicate(timeout=120)
        assert proc.returncode != 0
        lines = [line for line in err.splitlines() if line.startswith("preempted: ")]
        assert len(lines) == 2 and lines[0] == lines[1], err[-3000:]  # each rank says it, of the same step
        step = int(lines[0].split(" at step ")[1].split()[0])
        state = torch.load(tmp_path / to / "checkpoints" / f"step_{step:07d}" / "training_state.pt", weights_only=True)
        assert state["step"] == step and len(state["ranks"]) == 2
        resumed = run_tree(cmd(to), env=env_for_children(), timeout=300)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert losses(tmp_path / to) == pytest.approx(losses(tmp_path / "straight"), rel=1e-6), sig


def test_a_torchrun_of_two_processes_logs_the_samples_of_both_a_second(tmp_path):
    """Two processes under torchrun, a batch of 4 each: each step's logged `samples_per_second` is the 8 samples of both
    ranks over the step's `batch_time`, and `samples_per_second_per_gpu` one rank's 4 (open_clip_train's
    `samples_per_second` counts `batch_size * world_size`)."""
    from test_train import env_for_children, free_port, make_dataset

    data = make_dataset(tmp_path, n=16)
    done = run_tree([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
                     "-m", "compclip", "-q", "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", str(data),
                     "--out", str(tmp_path / "run"), "--steps", "2", "--batch-size", "4", "--workers", "0", "--device", "cpu"],
                    env=env_for_children(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert r["samples_per_second"] * r["batch_time"] == pytest.approx(2 * 4, rel=1e-9), r
        assert r["samples_per_second_per_gpu"] * r["batch_time"] == pytest.approx(4, rel=1e-9), r


def shard(path, n=12, damage=None, cut=None):
    """A webdataset shard of n samples (jpg + txt); `damage`: the member (e.g. "s003.jpg") whose header is overwritten
    with garbage; `cut`: keep only this many bytes."""
    import io
    import tarfile

    from conftest import image_bytes

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in range(n):
            for ext, data in (("jpg", image_bytes(i)), ("txt", f"a red square number {i}".encode())):
                info = tarfile.TarInfo(f"s{i:03d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    raw = bytearray(buf.getvalue())
    if damage is not None:
        with tarfile.open(fileobj=io.BytesIO(bytes(raw))) as tar:
            at = next(m.offset for m in tar if m.name == damage)
        raw[at:at + 512] = bytes(range(256)) * 2
    path.write_bytes(bytes(raw[:cut] if cut else raw))
    return path


def test_a_damaged_tar_header_is_named_and_reading_goes_on_past_it(tmp_path, capsys):
    """Python's tarfile took a damaged header for the end of the shard: 3 of 12 samples, no word. Now the damage is a
    bad record naming the shard and its bytes, the sample that lost its image is counted as missing one, and the other
    10 are read; a damaged last header is named too; `--into-shards` copies the rest and says so; a shard cut off is
    one error line naming it, the other shards copied."""
    from compclip.data import WebDatasetReader
    from conftest import run_main

    shard(tmp_path / "a-0.tar", damage="s003.jpg")
    shard(tmp_path / "a-1.tar", damage="s011.txt")  # the last member's header
    reader = WebDatasetReader(str(tmp_path / "a-{0..1}.tar"))
    captions = [s["caption"] for s in reader]
    assert len(captions) == 22 and captions.count("a red square number 3") == 1 and captions.count("a red square number 11") == 1
    stats = reader.stats()
    assert stats["bad_record"] == 2 and stats["missing_image"] == 1, stats  # s003 lost its image; s011 its caption (no record)
    code, out, err = run_main(capsys, "-q", "concepts", tmp_path / "a-{0..1}.tar", "--into-shards", tmp_path / "copies", "--what",
                              "noun-phrases")
    assert code == 0, err
    assert out.startswith("2 shards written to") and "(24 samples," in out  # 12 keys each: each damaged one keeps a member
    assert f"warning: {tmp_path / 'a-0.tar'}: bytes " in err and "(a damaged header): one member lost before s003.txt" in err
    assert f"warning: {tmp_path / 'a-1.tar'}: bytes " in err and "after the last good member" in err
    whole = shard(tmp_path / "b-0.tar")
    shard(tmp_path / "b-1.tar", cut=whole.stat().st_size // 2)
    code, out, err = run_main(capsys, "-q", "concepts", tmp_path / "b-{0..1}.tar", "--into-shards", tmp_path / "b-copies", "--what",
                              "noun-phrases")
    assert code == 2 and err.startswith(f"error: 1 shard(s) not copied ({tmp_path / 'b-1.tar'}: ReadError") and "Traceback" not in err
    assert sorted(p.name for p in (tmp_path / "b-copies").iterdir()) == ["b-0.tar"]


@contextlib.contextmanager
def small_disk(path, size="2m", readonly=False):
    """A real file system of `size` (tmpfs) at `path`, read-only if asked; skipped where mounting is not allowed."""
    import subprocess

    path.mkdir()
    options = f"size={size}" + (",ro" if readonly else "")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_disk_that_fills_while_a_checkpoint_is_written_stops_in_one_line(tmp_path, capsys):
    """ENOSPC in safetensors' writer and in torch.save ("unexpected pos") and in a result JSON: one line naming the file
    and that the earlier checkpoint is as it was, exit 2, no traceback; the run resumes once there is room. (The run the
    disk stops is a process of its own; the first two steps and the resume run in this process.)"""
    import shutil
    import subprocess

    from test_train import compclip, env_for_children, make_dataset

    data = make_dataset(tmp_path, n=16)
    with small_disk(tmp_path / "disk", "128m") as disk:
        cmd = lambda steps: compclip("train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", str(data),  # noqa: E731
                                     "--out", str(disk / "run"), "--steps", str(steps), "--batch-size", "8", "--save-every", "2",
                                     "--workers", "0", "--schedule", "const", "--keep", "5")
        assert run_main(capsys, *cmd(2)[3:])[0] == 0
        used = sum(f.stat().st_size for f in (disk / "run").rglob("*") if f.is_file())
        free = shutil.disk_usage(disk).free
        (disk / "filler").write_bytes(b"\0" * (free - used // 3))  # room for a third of a checkpoint
        stopped = subprocess.run(cmd(4), env=env_for_children(), capture_output=True, text=True)
        assert stopped.returncode == 2 and "Traceback" not in stopped.stderr, stopped.stderr[-2000:]
        line = stopped.stderr.strip().splitlines()[-1]
        assert line.startswith(f"error: {disk / 'run' / 'checkpoints' / 'step_0000004'}: not written: the disk is full")
        assert line.endswith("training stopped at step 4; the checkpoints before it are untouched: make room and run the same "
                             "command to resume")
        assert (disk / "run" / "checkpoints" / "latest").read_text() == "step_0000002"
        assert not [p for p in (disk / "run" / "checkpoints").iterdir() if p.name.startswith(".")]  # no half-written folder
        (disk / "filler").unlink()
        code, _, err = run_main(capsys, *cmd(4)[3:])
        assert code == 0, err[-2000:]


def test_a_read_only_out_is_one_line(tmp_path, capsys):
    """`train` and `eval` into a read-only file system: one line each, naming the path and the reason."""
    from conftest import run_main
    from test_train import make_dataset

    data = make_dataset(tmp_path, n=16)
    retrieval_data(tmp_path / "data")
    with small_disk(tmp_path / "ro", readonly=True) as ro:
        code, _, err = run_main(capsys, "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", data,
                                "--out", ro / "run", "--steps", "2", "--batch-size", "8", "--workers", "0")
        assert code == 2 and err.splitlines()[-1] == (f"error: {ro / 'run' / '.lock'}: not written: the file system is read-only "
                                                      "(Read-only file system); nothing was written there")
        code, _, err = run_main(capsys, "eval", "--model", "compclip-tiny-clip", "--benchmark", "retrieval", "--data-root",
                                tmp_path / "data", "--out", ro / "results")
        assert code == 2 and err.startswith(f"error: --out {ro / 'results'}: cannot write there") and "Read-only" in err


def test_each_writers_full_disk_error_becomes_one_storage_error(tmp_path):
    """The three forms a full disk takes: OSError errno 28 (a JSON), safetensors' "os error 28", torch.save's
    "unexpected pos" without an errno. Each is one StorageError naming the path; the earlier file stays."""
    import torch
    from safetensors.torch import save_file

    from compclip.errors import StorageError

    with small_disk(tmp_path / "disk", "256k") as disk:
        write_json(disk / "kept.json", {"a": 1})
        writers = {"result.json": lambda tmp: tmp.write_text("x" * 400_000),
                   "weights.safetensors": lambda tmp: save_file({"w": torch.zeros(100_000)}, tmp),
                   "state.pt": lambda tmp: torch.save({"w": torch.zeros(100_000)}, tmp)}
        for name, write in writers.items():
            with pytest.raises(StorageError, match=rf"^{disk / name}: not written: the disk is full.*; nothing was written there$"), \
                    atomic_path(disk / name) as tmp:
                write(tmp)
        with pytest.raises(StorageError, match=r"the earlier kept\.json there is as it was"), atomic_path(disk / "kept.json") as tmp:
            tmp.write_text("x" * 400_000)
        assert (disk / "kept.json").read_text() == '{\n  "a": 1\n}\n' and sorted(p.name for p in disk.iterdir()) == ["kept.json"]


def test_a_quota_used_up_at_fsync_is_one_line_and_keeps_the_earlier_result(tmp_path, capsys, monkeypatch):
    """A group quota (EDQUOT) as NFS reports it: the write is buffered and the error comes at fsync. `eval` into a folder
    already holding its result ends in one line naming the file it wrote first (the items: the result is written last)
    and the quota, exit 2; the earlier result, its items and no temporary file are left (a kernel without tmpfs quotas
    cannot make a real one, so the error is injected)."""
    import errno
    import json

    from conftest import run_main

    retrieval_data(tmp_path / "data")
    evaluate = ("eval", "--model", "compclip-tiny-clip", "--benchmark", "retrieval", "--data-root", tmp_path / "data", "--out",
                tmp_path / "results")
    assert run_main(capsys, *evaluate)[0] == 0
    result, items = tmp_path / "results" / "retrieval.json", tmp_path / "results" / "retrieval.items.parquet"
    before, items_before = result.read_bytes(), items.read_bytes()
    fsync = os.fsync

    def over_quota(fd):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path / "results")):
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", over_quota)
    code, _, err = run_main(capsys, *evaluate, "--force")
    assert code == 2 and err.splitlines()[-1] == (f"error: {items}: not written: the disk quota is used up (Disk quota exceeded); "
                                                  "the earlier retrieval.items.parquet there is as it was"), err
    assert result.read_bytes() == before and json.loads(before)["metrics"] and items.read_bytes() == items_before
    assert sorted(p.name for p in result.parent.iterdir() if p.name.startswith(".")) == []


def test_a_bundled_model_is_said_random_once_not_warned_at_every_load(monkeypatch, caplog):
    """open_clip warns "initialized randomly" at every load of a model without weights; for a model compclip bundles that is
    by design: one INFO line a process, no warning. A named model without its weights still warns."""
    import logging

    from compclip.models import factory, load_model

    monkeypatch.setattr(factory, "_SAID_RANDOM", set())
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            load_model("compclip-tiny-clip")
        load_model("ViT-B-32")  # an open_clip model loaded without weights: its warning stays
    said = [r for r in caplog.records if "bundles, initialised randomly" in r.getMessage()]
    warned = [r.getMessage() for r in caplog.records if "initialized randomly" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO
    assert warned == ["No pretrained weights loaded for model 'ViT-B-32'. Model initialized randomly."]


def test_skips_are_said_once_a_run_not_every_epoch_in_every_worker(tmp_path, capsys):
    """Two rows without an image, three epochs (12 steps, 4 batches an epoch), two DataLoader workers: each row named once,
    the count once as a warning (it was 12 lines for 2 bad rows in 3 steps); the totals of the later epochs are INFO."""

    from test_train import compclip, make_dataset

    data = make_dataset(tmp_path, n=16)
    data.write_text(data.read_text() + "img/gone-1.jpg,a red square to the left of a red circle\n"
                    "img/gone-2.jpg,a blue square to the left of a red circle\n")
    code, _, err = run_main(capsys, *compclip("train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", data,
                                              "--out", tmp_path / "run", "--steps", "12", "--batch-size", "4", "--workers", "2",
                                              "--shuffle", "0")[3:])
    assert code == 0, err[-2000:]
    lines = (tmp_path / "run" / "train.log").read_text().splitlines()
    warnings = [line for line in lines if " WARNING " in line and "skipped" in line]
    assert sum("gone-1.jpg" in line for line in warnings) == 1 and sum("gone-2.jpg" in line for line in warnings) == 1
    totals = [line for line in lines if "read 16 samples, skipped 2 (2 missing image)" in line]
    assert len(warnings) == 3 and len(totals) >= 2 and sum(" WARNING " in line for line in totals) == 1, "\n".join(lines)


def two_nodes(args, workdirs, port, env):
    """Two `torchrun --nnodes 2 --nproc-per-node 1` launches on this machine, as two nodes would run them: c10d
    rendezvous at 127.0.0.1, each node in its own working folder (its local disk). Node 1 starts once node 0 listens on
    the endpoint, so node 0 hosts the rendezvous store as a cluster's head node does (started together, either may win
    the port, and a test that hangs node 1 would hang the store)."""
    import subprocess
    import sys

    def launch(rank):
        return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                                 "--node-rank", str(rank), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                                 "--rdzv-id", "compclip-test", *args],
                                cwd=workdirs[rank], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    head = launch(0)
    wait_until(lambda: listening(port), head)
    return [head, launch(1)]


def listening(port):
    """Whether a socket on this machine listens on `port`, read from /proc/net without connecting to it."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as rows:
            next(rows)
            if any(int(row.split()[1].rsplit(":", 1)[1], 16) == port and row.split()[3] == "0A" for row in rows):
                return True
    return False


def test_two_nodes_compute_what_one_process_does_on_the_whole_batch(tmp_path):
    """One loss step over two nodes of one process each: the loss terms and every gradient equal one process's on the
    whole batch (tests/dist_grads.py, as the two-process tests on one node)."""
    import dist_grads
    from compclip.train import DistEnv
    from test_train import HERE, assert_same, env_for_children, free_port, load_result

    nodes = [tmp_path / "node0", tmp_path / "node1"]
    for node in nodes:
        node.mkdir()
    procs = two_nodes([str(HERE / "dist_grads.py"), str(tmp_path / "grads.pt"), "2", "c2lip"], nodes, free_port(), env_for_children())
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    assert_same(load_result(tmp_path / "grads.pt"), dist_grads.compute(DistEnv(), 1, "c2lip"))


@pytest.mark.parametrize("raised, said", [
    ("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 20000ms for recv operation to complete",
     "Timed out waiting 20000ms for recv operation to complete"),
    ("Application timeout caused pair closure", "Application timeout caused pair closure"),  # DDP's other buckets, as seen
    ("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [127.0.0.1]:5858: Connection reset by peer. This is "
     "typically the result of another rank dying", "Read error [127.0.0.1]:5858: Connection reset by peer"),
    ("mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)", None),  # a bug stays a traceback
])
def test_a_lost_peer_is_told_from_gloos_words_and_a_bug_is_not(raised, said):
    """Each form gloo gives a collective that a hung or dead rank broke off: "pair closure", without a source location
    and the library's name, was a traceback on the hung node's peer (seen in a suite run)."""
    from compclip.train.faults import collective_failed, first_line

    error = RuntimeError(raised)
    assert collective_failed(error) == (said is not None)
    if said is not None:
        assert first_line(error) == said


def test_two_nodes_write_one_run_folder_and_resume_after_one_is_killed(tmp_path):
    """`compclip train` on two nodes into one shared --out: one run folder (rank 0 writes it; node 1's folder stays empty).
    Node 1 hangs mid-run (SIGSTOP): node 0's rank stops by itself after --dist-timeout, in one line naming the last
    checkpoint, with exit 75; the scheduler ends node 1; both launched again resume from the last checkpoint to the losses
    of a run never stopped."""
    import re
    import signal

    from test_train import env_for_children, free_port, losses, make_dataset

    data = make_dataset(tmp_path, n=32)
    nodes = [tmp_path / "node0", tmp_path / "node1"]
    for node in nodes:
        node.mkdir()

    def train(out):
        return ["-m", "compclip", "-q", "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", str(data),
                "--out", str(tmp_path / out), "--steps", "24", "--batch-size", "4", "--save-every", "4", "--workers", "1",
                "--lr", "1e-3", "--device", "cpu", "--dist-timeout", "20"]

    for proc in two_nodes(train("straight"), nodes, free_port(), env_for_children()):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    procs = two_nodes(train("killed"), nodes, free_port(), env_for_children())
    wait_for_steps(tmp_path / "killed" / "log.jsonl", 6, procs[0])
    node1 = [*children(procs[1].pid), procs[1].pid]
    for pid in node1:  # node 1 hangs: its rank and its agent
        os.kill(pid, signal.SIGSTOP)
    _, err = procs[0].communicate(timeout=120)  # node 0's rank gives up on it after --dist-timeout
    latest = tmp_path / "killed" / "checkpoints" / (tmp_path / "killed" / "checkpoints" / "latest").read_text()
    said = [line for line in err.splitlines() if line.startswith("error: rank 0 of 2:")]
    assert len(said) == 1 and re.fullmatch(
        r"error: rank 0 of 2: a collective with the other ranks failed at step \d+, as when another rank died, or hung past "
        r"--dist-timeout 20 s \((Timed out waiting 20000ms for (send|recv) operation to complete|Application timeout caused pair "
        r"closure)\); the last checkpoint is "
        + re.escape(str(latest)) + ": run the same command on every node to resume", said[0]), err[-3000:]
    assert "exitcode: 75" in err  # the rank's own exit, which torchrun reports
    for pid in node1:  # the scheduler ends the job
        os.kill(pid, signal.SIGKILL)
    procs[1].communicate(timeout=60)
    for proc in two_nodes(train("killed"), nodes, free_port(), env_for_children()):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    assert losses(tmp_path / "killed") == pytest.approx(losses(tmp_path / "straight"), rel=1e-6)
    assert not any(nodes[1].iterdir())  # one run folder: node 1 wrote nothing in its own


def test_report_names_a_result_that_does_not_parse_or_is_not_a_fraction(tmp_path, capsys):
    """A result file cut short, another tool's JSON, or a score written as a percentage: one line naming the file (and
    the metric), nothing written."""
    from conftest import run_main

    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "sugarcrepe.json").write_text('{"metrics": {"add": 0.9')
    code, _, err = run_main(capsys, "report", folder, "--out", tmp_path / "report")
    assert code == 2 and err.startswith(f"error: {folder / 'sugarcrepe.json'}: not a readable result (JSONDecodeError")
    (folder / "sugarcrepe.json").write_text('{"accuracy": 0.9}')
    code, _, err = run_main(capsys, "report", folder, "--out", tmp_path / "report")
    assert code == 2 and err == (f'error: {folder / "sugarcrepe.json"}: not a `compclip eval` result (no "metrics" object); move it '
                                 'out of the folder\n')
    (folder / "sugarcrepe.json").write_text('{"metrics": {"add": 0.9, "swap_att": {"acc": 73.1, "n": 666}}}')
    code, _, err = run_main(capsys, "report", folder, "--out", tmp_path / "report")
    assert code == 2 and err == (f"error: {folder / 'sugarcrepe.json'}: metrics.swap_att.acc is 73.1, outside [0, 1] (a score is a "
                                 "fraction; 1 such)\n")
    assert not (tmp_path / "report").exists()


def test_report_refuses_a_folder_given_twice_a_missing_one_and_an_out_that_is_a_file(tmp_path, capsys):
    """The edges of `report`'s arguments, each one line: the same folder twice (it kept one row, silently), a folder that
    is not there or is a file (it said "no result files"), and --out an existing file (a FileExistsError traceback)."""
    from conftest import run_main

    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "sugarcrepe.json").write_text('{"metrics": {"add": 0.9}}')
    for args, said in (([folder, tmp_path / "." / "results"], f"error: {tmp_path / '.' / 'results'}: given twice; a report has one row "
                                                               "per results folder\n"),
                       ([tmp_path / "nothing"], f"error: {tmp_path / 'nothing'}: no such folder; give the folders that `compclip "
                                                "eval --out` wrote, one per model\n"),
                       ([folder / "sugarcrepe.json"], f"error: {folder / 'sugarcrepe.json'}: a file; give the folders that `compclip "
                                                      "eval --out` wrote, one per model\n"),
                       ([folder, "--out", folder / "sugarcrepe.json"], f"error: --out {folder / 'sugarcrepe.json'} is a file; the report "
                                                                       "writes a folder\n")):
        out = [] if "--out" in args else ["--out", tmp_path / "report"]
        code, _, err = run_main(capsys, "report", *args, *out)
        assert (code, err) == (2, said)
    assert not (tmp_path / "report").exists()


def test_weights_of_another_model_are_refused_naming_what_does_not_fit(tmp_path, capsys):
    """SigLIP-style weights given to a CLIP-style model crashed in open_clip's loader (AttributeError on logit_bias): now
    the error names the file and the keys that do not fit, for eval and train alike."""
    from compclip.models import load_model, save_checkpoint
    from conftest import run_main
    from test_train import make_dataset

    save_checkpoint(load_model("compclip-tiny-siglip")[0], tmp_path / "siglip")
    weights = tmp_path / "siglip" / "model.safetensors"
    retrieval_data(tmp_path / "data")
    data = make_dataset(tmp_path / "train", n=16)
    for args in (["eval", "--benchmark", "retrieval", "--data-root", tmp_path / "data", "--out", tmp_path / "r"],
                 ["train", "--method", "clip", "--train-data", data, "--out", tmp_path / "t", "--steps", "1", "--workers", "0"]):
        code, _, err = run_main(capsys, *args, "--model", "compclip-tiny-clip", "--pretrained", weights)
        assert code == 2 and err.startswith(f"error: {weights} does not fit this architecture:") and "unexpected keys: logit_bias" in err
        assert "Traceback" not in err


def test_a_damaged_concept_shard_is_named_with_its_repair_and_the_repair_works(tmp_path, capsys):
    """A shard cut short: `train` (two DataLoader workers) stops in one line naming the file and the command that repairs
    it, and exits (it hung: the workers ignored the loader's own SIGTERM); that command removes the shard, parses its
    captions again and indexes them all; training then runs."""
    import subprocess

    from test_train import compclip, env_for_children, make_dataset

    data = make_dataset(tmp_path, n=24)
    env = env_for_children()
    store = tmp_path / "store"
    assert run_main(capsys, "-q", "concepts", data, "--out", store, "--what", "noun-phrases")[0] == 0
    shard = next((store / "parts").glob("*/shard-*.arrow"))
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    train = compclip("train", "--method", "c2lip", "--model", "compclip-tiny-siglip", "--train-data", str(data), "--concepts", str(store),
                     "--out", str(tmp_path / "run"), "--steps", "2", "--batch-size", "8", "--workers", "2")
    stopped = subprocess.run(train, env=env, capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 2 and "Traceback" not in stopped.stderr, stopped.stderr[-2000:]
    assert stopped.stderr.strip().splitlines()[-1] == (
        f"error: {shard}: a damaged concept shard (ArrowInvalid: Not an Arrow file); run `compclip concepts CAPTIONS --out {store}` "
        "again with the same options: it removes the shard and parses its captions again, keeping the rest")
    code, out, err = run_main(capsys, "-q", "concepts", data, "--out", store, "--what", "noun-phrases")
    assert code == 0 and "removed it, its captions are parsed again" in err
    assert out.strip().splitlines()[-1] == "indexed 16 records"  # the distinct captions, as the first build
    code, _, err = run_main(capsys, *train[3:])
    assert code == 0, err[-2000:]


def test_a_full_disk_reads_as_such_in_every_form_safetensors_words_it():
    """safetensors 0.4.1 (the oldest pyproject.toml allows; `make test-lowest` met it) words a full disk as Rust's debug
    form, newer releases as "os error 28": both are the disk, and another error is not."""
    from compclip.io import WHY, _storage_errno

    old = "Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: \"No space left on device\" })"
    new = "Error while serializing: I/O error: No space left on device (os error 28)"
    assert _storage_errno(Exception(old)) == _storage_errno(Exception(new)) == 28 and WHY[28] == "the disk is full"
    assert _storage_errno(Exception("Error while serializing: IoError(Os { code: 2, kind: NotFound })")) is None


# ---- a folder a group shares, and a filesystem without locks ----------------------------------------------------------

OTHER = 65534  # nobody, in group nogroup: the colleague


def as_colleague(code: str, home: Path) -> subprocess.CompletedProcess:
    """Python `code` run as another user (uid 65534) whose only group is the shared folder's (gid 65534)."""
    from test_train import env_for_children

    env = {**env_for_children(), "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
    return subprocess.run(["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups", sys.executable, "-c", code],
                          env=env, capture_output=True, text=True, cwd="/", timeout=300)


@pytest.fixture
def group_folder():
    """A folder shared by root and the colleague's group (setgid, group-writable), outside pytest's private tmp."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to act as a second user")
    folder = Path(tempfile.mkdtemp(prefix="compclip-group-", dir="/tmp"))
    os.chown(folder, 0, OTHER)
    os.chmod(folder, 0o2775)
    reach = as_colleague("import compclip.io", folder)
    if reach.returncode:
        shutil.rmtree(folder)
        pytest.skip(f"another user cannot import this checkout: {reach.stderr.strip().splitlines()[-1]}")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_groups_lock_takes_the_umasks_mode_and_a_colleague_takes_it_over(group_folder):
    """Under umask 002 the lock files compclip makes are group-writable, as `open()` makes files: a colleague takes a
    run's or a store's lock once it is free, is refused in one line naming the holder while it is held, and takes one
    an older compclip left 0644 (locked read-only: flock needs no write access)."""
    from compclip.io import FolderLock

    lock = group_folder / "store" / ".index.lock"
    with umask(0o002):
        FolderLock(lock, "a test").acquire().release()
        (group_folder / "plain").write_text("x")
    assert mode(lock) == mode(group_folder / "plain") == 0o664
    take = (f"from pathlib import Path\nfrom compclip.io import FolderLock\nFolderLock(Path({str(lock)!r}), 'a compclip concepts run')"
            ".acquire()\nprint('taken')")
    assert as_colleague(take, group_folder).stdout.strip() == "taken"
    with FolderLock(lock, "a compclip concepts run"):
        refused = as_colleague(take, group_folder)
    assert refused.returncode == 1 and f"{lock.parent} is in use by a compclip concepts run (host " in refused.stderr
    assert f"pid {os.getpid()}, since" in refused.stderr, refused.stderr
    os.chown(lock, 0, 0)
    os.chmod(lock, 0o644)  # an older compclip's lock file, not the group's
    done = as_colleague(take, group_folder)
    assert done.stdout.strip() == "taken", done.stderr


def test_another_users_private_feature_cache_is_said_and_computed_around(group_folder):
    """An evaluation cache another user wrote under umask 077: the colleague's scores are the same as with the cache,
    computed anew, with one warning for reading and one for writing; no traceback."""
    from PIL import Image

    from compclip.eval import DualEncoderScorer
    from compclip.models import load_model

    for i, colour in enumerate(("red", "green")):
        Image.new("RGB", (40, 32), colour).save(group_folder / f"{i}.png")
    os.chmod(group_folder / "0.png", 0o644), os.chmod(group_folder / "1.png", 0o644)
    model, preprocess, tokenizer = load_model("compclip-tiny-clip")
    with umask(0o077):
        mine = DualEncoderScorer(model, preprocess, tokenizer, workers=0, cache_dir=group_folder / "cache").matrix(
            [group_folder / "0.png", group_folder / "1.png"], ["a red image", "a green image"])
    code = ("import sys, torch; from compclip.eval import DualEncoderScorer; from compclip.models import load_model\n"
            "model, preprocess, tokenizer = load_model('compclip-tiny-clip')\n"
            f"scores = DualEncoderScorer(model, preprocess, tokenizer, workers=0, cache_dir={str(group_folder / 'cache')!r}).matrix("
            f"[{str(group_folder / '0.png')!r}, {str(group_folder / '1.png')!r}], ['a red image', 'a green image'])\n"
            "print(scores.flatten().tolist())")
    theirs = as_colleague(code, group_folder)
    assert theirs.returncode == 0, theirs.stderr
    assert torch.allclose(torch.tensor(json.loads(theirs.stdout)), mine.flatten().float(), atol=1e-6)
    said = [line for line in theirs.stderr.splitlines() if "the feature cache cannot be" in line]
    assert len(said) == 2 and "cannot be read" in said[0] and "cannot be written" in said[1], theirs.stderr
    assert "Traceback" not in theirs.stderr


@pytest.fixture
def no_flock(monkeypatch):
    """A filesystem that keeps no locks (NFS mounted `nolock`): flock answers ENOLCK."""
    import fcntl

    def flock(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", flock)


def test_without_flock_a_marker_file_locks_and_a_dead_owners_marker_is_taken_over(tmp_path, no_flock):
    from compclip.errors import UsageError
    from compclip.io import FolderLock

    lock = tmp_path / ".lock"
    held = FolderLock(lock, "a compclip train run").acquire()
    marker = tmp_path / ".lock.held"
    assert marker.read_text().startswith(f"host {socket.gethostname()}, pid {os.getpid()}, since ")
    with pytest.raises(UsageError) as refused:
        FolderLock(lock, "a compclip train run").acquire()
    assert str(refused.value).startswith(f"{tmp_path} is in use by a compclip train run (host ") and \
        f"this filesystem keeps no locks, so {marker} marks it: if that process has ended, delete that file): wait" in str(refused.value)
    held.release()
    assert not marker.exists()
    ended = subprocess.Popen(["true"])
    ended.wait()
    marker.write_text(f"host {socket.gethostname()}, pid {ended.pid}, since 2026-01-01 00:00:00")  # killed before it released
    FolderLock(lock, "a compclip train run").acquire().release()
    marker.write_text("host another-node, pid 1, since 2026-01-01 00:00:00")  # alive or not, another node's is not ours to judge
    with pytest.raises(UsageError, match="another-node"):
        FolderLock(lock, "a compclip train run").acquire()


def test_a_run_and_a_concept_store_on_a_filesystem_without_flock(tmp_path, no_flock, capsys):
    from conftest import run_main
    from test_train import make_dataset

    data = make_dataset(tmp_path, n=8)
    code, _, err = run_main(capsys, "concepts", str(data), "--out", str(tmp_path / "concepts"))
    assert code == 0, err
    code, _, err = run_main(capsys, "train", "--method", "clip", "--model", "compclip-tiny-clip", "--train-data", str(data),
                            "--out", str(tmp_path / "run"), "--steps", "1", "--batch-size", "4", "--workers", "0")
    assert code == 0, err
    assert not list(tmp_path.rglob("*.held"))  # every marker released


def test_two_ranks_draw_one_permutation_of_a_file_and_read_disjoint_parts_of_it(tmp_path):
    """Two ranks of a gloo process group (started as torchrun starts them, from its variables), two DataLoader workers
    each, over a 48-row CSV shuffled whole: every process draws the same permutation of the file from (seed, epoch) and
    reads its own part of it, so the ranks' records are disjoint and together the file, each once, as
    DistributedSampler shares one permutation among ranks. Worker w of rank r reads every 4th index of numpy's
    permutation (`default_rng([seed, epoch])`, the reference drawn here) from 2r + w on."""
    import numpy as np

    from test_train import env_for_children, free_port, make_dataset

    data = make_dataset(tmp_path)
    script = tmp_path / "read.py"
    script.write_text("import json, sys\nimport torch.distributed as dist\nfrom torch.utils.data import DataLoader\n"
                      "from compclip.data import open_reader\n"
                      "dist.init_process_group('gloo')\n"
                      "reader = open_reader(sys.argv[1], sample_seed=3000, shuffle=1000)\n"
                      "seen = [(s['shard'], s['pos'], s['key']) for s in DataLoader(reader, batch_size=None, num_workers=2)]\n"
                      "open(f'{sys.argv[2]}.{dist.get_rank()}', 'w').write(json.dumps(seen))\n"
                      "dist.destroy_process_group()\n")
    env = {**env_for_children(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    ranks = [subprocess.Popen([sys.executable, str(script), str(data), str(tmp_path / "seen")], env={**env, "RANK": str(rank)},
                              stderr=subprocess.PIPE, text=True) for rank in range(2)]
    try:
        for proc in ranks:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err[-3000:]
    finally:
        for proc in ranks:
            proc.kill()
    ranks = [json.loads((tmp_path / f"seen.{rank}").read_text()) for rank in range(2)]
    rows = [[int(key.rsplit(":", 1)[1]) - 2 for _, _, key in seen] for seen in ranks]
    assert not set(rows[0]) & set(rows[1]) and sorted(rows[0] + rows[1]) == list(range(48))
    permutation = np.random.default_rng([3000, 0]).permutation(48)
    for rank, seen in enumerate(ranks):
        assert {shard for shard, _, _ in seen} == {2 * rank, 2 * rank + 1}
        assert [permutation[shard::4][pos] for shard, pos, _ in seen] == rows[rank]
