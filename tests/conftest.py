import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # hub calls fail fast instead of retrying for 30 s

import io
import random
from pathlib import Path

import pytest
import torch
from PIL import Image

SHARED = Path(os.environ.get("COMPCLIP_SHARED", Path(__file__).resolve().parents[2] / "shared"))


def shared_data(*parts: str) -> Path:
    """A path under the read-only shared data beside the checkout; CI always has it."""
    path = SHARED.joinpath("data", *parts)
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


def run_main(capsys, *args) -> tuple[int, str, str]:
    """`compclip ARGS` in this process (option checks need no model): exit code, stdout, stderr."""
    from compclip.cli import main

    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exit_.value.code, out, err
