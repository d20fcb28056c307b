import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # hub calls fail fast instead of retrying for 30 s

import contextlib
import io
import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

SHARED = Path(os.environ.get("COMPCLIP_SHARED", Path(__file__).resolve().parents[2] / "shared"))


def shared_data(*parts: str) -> Path:
    """A path under the read-only shared data beside the checkout; CI always has it."""
    return _shared("data", *parts)


def shared_paper(name: str) -> Path:
    """A paper's text under the shared papers beside the checkout (`shared/papers/NAME`); CI always has it."""
    return _shared("papers", name)


def _shared(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.exists():
        if os.environ.get("CI"):
            raise FileNotFoundError(f"{path}: CI must run with shared/ beside the checkout")
        pytest.skip(f"{path} not here (set COMPCLIP_SHARED)")
    return path


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    random.seed(0)


@pytest.fixture(autouse=True)
def _quiet_flag(monkeypatch):
    """`--quiet` given to a command run in this process (`run_main`) is process-wide: undone after each test, so
    that the next test in the worker sees the progress bars it expects."""
    from compclip import progress

    monkeypatch.setattr(progress, "_QUIET", progress.is_quiet())


def image_bytes(seed: int, fmt: str = "JPEG", size: tuple[int, int] = (40, 32)) -> bytes:
    """A small real image with seeded content, encoded in `fmt`."""
    rng = random.Random(seed)
    img = Image.new("RGB", size, tuple(rng.randrange(256) for _ in range(3)))
    img.putpixel((rng.randrange(size[0]), rng.randrange(size[1])), (255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, fmt)
    return buf.getvalue()


def assert_same_terms(terms: dict, expected: dict, ours: list, theirs: list, atol: float = 1e-6) -> None:
    """A loss's terms equal a reference formula's, term by term, and so do the gradients of their sums on the leaves each
    was computed from (`ours`, `theirs`: the same values, separate leaves)."""
    assert terms.keys() == expected.keys()
    for key in terms:
        assert torch.allclose(terms[key], expected[key], atol=atol, rtol=0), (key, terms[key], expected[key])
    sum(terms.values()).backward()
    sum(expected.values()).backward()
    for x, y in zip(ours, theirs, strict=True):
        assert torch.allclose(x.grad, y.grad, atol=atol, rtol=0)


def run_main(capsys, *args) -> tuple[int, str, str]:
    """`compclip ARGS` in this process (option checks need no model): exit code, stdout, stderr."""
    from compclip.cli import main

    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def killed_at_first(cmd: list[str], folder: Path, pattern: str, poll: float = 0.05) -> list[Path]:
    """`cmd` run offline in a process of its own and killed (SIGKILL: no cleanup runs) as soon as `folder` holds a file
    matching `pattern`, or after two minutes: the files of `pattern` it left, sorted."""
    import time

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    deadline = time.time() + 120
    while not list(folder.glob(pattern)) and time.time() < deadline and proc.poll() is None:
        time.sleep(poll)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return sorted(folder.glob(pattern))


def run_tree(cmd: list[str], *, timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, capture_output=True, text=True)` for a command that starts processes of its own (torchrun and
    its ranks): past `timeout` the whole process group is killed, not torchrun alone, so that no rank is left behind
    waiting on a collective for the rest of the suite."""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(f"{' '.join(map(str, cmd[:6]))} ...: still running after {timeout} s; its process group "
                                 f"killed. Its stderr:\n{err[-3000:]}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


HUB_COMMIT = "0" * 40


def plant_hub_repo(hub: Path, repo: str, files: dict, absent: tuple[str, ...] = ("config.json",)) -> Path:
    """A model repository in a huggingface_hub cache at `hub`, as a download leaves it: `files` (name: bytes, or a
    callable writing into the snapshot folder) under one snapshot that refs/main names, and `.no_exist` records for the
    files the repository lacks (transformers asks for config.json), so that an offline load finds what a user's would."""
    root = hub / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / HUB_COMMIT
    snapshot.mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(HUB_COMMIT)
    (root / ".no_exist" / HUB_COMMIT).mkdir(parents=True, exist_ok=True)
    for name in absent:
        (root / ".no_exist" / HUB_COMMIT / name).touch()
    for name, content in files.items():
        if callable(content):
            content(snapshot)
        else:
            (snapshot / name).write_bytes(content)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty huggingface_hub cache that this process and the commands it starts read (HF_HUB_OFFLINE is set)."""
    hub = tmp_path / "hub"
    hub.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub))
    return hub


@pytest.fixture(scope="session")
def swap_root(tmp_path_factory):
    """SugarCrepe's and SugarCrepe++'s published swap_att files, with stand-in images under their real COCO names (one
    data root a test process, for the tests of the library, the gallery and the comparison)."""
    root = tmp_path_factory.mktemp("data")
    names = set()
    for bench in ("sugarcrepe", "sugarcrepe_pp"):
        (root / bench).mkdir()
        (root / bench / "swap_att.json").symlink_to(shared_data(bench, "swap_att.json"))
        records = json.loads(shared_data(bench, "swap_att.json").read_text())
        names |= {r["filename"] for r in (records.values() if isinstance(records, dict) else records)}
    (root / "coco" / "val2017").mkdir(parents=True)
    for name in sorted(names):
        seed = int(name.split(".")[0])
        Image.new("RGB", (32, 24), ((seed * 37) % 256, (seed * 91) % 256, (seed * 13) % 256)).save(root / "coco" / "val2017" / name)
    return root


@pytest.fixture(scope="session")
def two_models(swap_root, tmp_path_factory):
    """Two tiny CLIP models (initialised with seeds 0 and 1) scored on SugarCrepe's and SugarCrepe++'s swap_att through
    `compclip.evaluate`: results folders `base` and `other`, per-item files beside them."""
    import compclip
    from compclip.models import load_model

    folder = tmp_path_factory.mktemp("two-models")
    for name, seed in (("base", 0), ("other", 1)):
        model, preprocess, tokenizer = load_model("compclip-tiny-clip", init_seed=seed)
        compclip.evaluate(model, preprocess, tokenizer, "sugarcrepe/swap_att,sugarcrepe_pp/swap_att", data_root=swap_root,
                          out=folder / name, workers=0)
    return folder


OPENED: list[str] | None = None  # every file this process opens while `opened` counts them
_HOOKED = False


def _count_open(event: str, args: tuple) -> None:
    if OPENED is not None and event == "open" and isinstance(args[0], (str, os.PathLike)):
        OPENED.append(os.fspath(args[0]))


@contextlib.contextmanager
def opened():
    """The files opened inside the block, as Python's audit hook `open` reports each (PIL's own opening of an image
    included); an audit hook cannot be removed, so it counts only while a block runs."""
    global OPENED, _HOOKED
    if not _HOOKED:
        sys.addaudithook(_count_open)
        _HOOKED = True
    OPENED = []
    try:
        yield OPENED
    finally:
        OPENED = None
