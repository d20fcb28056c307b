"""Dependencies: a command that needs an optional one, and the command line for a core one, names the package, the
version and the install command in one line, and the minimums are pyproject.toml's own."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from compclip import extras
from compclip.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]


def test_the_minimums_are_pyproject_extras():
    """extras.MINIMUM and pyproject.toml's optional dependencies name the same floor for each package."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = {}
    for extra, requirements in project["optional-dependencies"].items():
        for requirement in requirements:
            name, floor = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", requirement).groups()
            floors[name] = (floor, extra)
    assert {package: floors[package] for package in extras.MINIMUM} == extras.MINIMUM


def test_a_missing_or_old_package_is_one_line_naming_what_to_install(monkeypatch):
    installed = __import__("importlib.metadata").metadata.version("transformers")
    monkeypatch.setitem(extras.MINIMUM, "transformers", ("99.1", "hf"))
    with pytest.raises(UsageError) as old:
        extras.need("transformers", "--format hf")
    assert str(old.value) == f"--format hf needs transformers>=99.1, and {installed} is installed: pip install -U 'compclip[hf]'"
    monkeypatch.setitem(extras.MINIMUM, "compclip-no-such-package", ("1.0", "hf"))
    with pytest.raises(UsageError, match=r"^x needs compclip-no-such-package>=1.0, which is not installed: pip install 'compclip\[hf\]'$"):
        extras.need("compclip-no-such-package", "x")
    monkeypatch.setitem(extras.MINIMUM, "transformers", (installed, "hf"))
    extras.need("transformers", "--format hf")  # the minimum itself passes
    assert extras.release("5.4.0.dev0") == (5, 4, 0) < extras.release("5.10") and extras.release("4.57.1") < (5, 4)


def test_export_to_transformers_with_an_old_transformers_stops_before_writing(tmp_path, monkeypatch, capsys):
    from compclip.models import load_model, save_checkpoint
    from conftest import run_main

    model, _, _ = load_model("compclip-tiny-clip")
    ckpt = save_checkpoint(model, tmp_path / "ckpt")
    monkeypatch.setitem(extras.MINIMUM, "transformers", ("99.1", "hf"))
    code, _, err = run_main(capsys, "export", ckpt, tmp_path / "hf", "--format", "hf")
    assert code == 2 and err.startswith("error: --format hf needs transformers>=99.1, and ") and err.count("\n") == 1
    assert not (tmp_path / "hf").exists()


def test_a_core_dependency_older_than_compclips_floor_is_one_line_at_the_command(tmp_path):
    """An image's own open_clip 2.32 under a `--no-deps` install: the command line says so before any model is built
    (the floor read from compclip's own installed requirements), and the floor itself passes."""
    from importlib import metadata

    floor = next(r.split(">=")[1] for r in metadata.requires("compclip") if r.startswith("open-clip-torch>="))
    for version, refused in (("2.32.0", True), (floor, False)):
        planted = tmp_path / version
        (planted / f"open_clip_torch-{version}.dist-info").mkdir(parents=True)
        (planted / f"open_clip_torch-{version}.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: open_clip_torch\nVersion: {version}\n")
        done = subprocess.run([sys.executable, "-m", "compclip", "methods"], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join([str(planted), os.environ.get("PYTHONPATH", "")])})
        if refused:
            assert done.returncode == 2 and done.stderr.strip().splitlines() == [
                f"error: compclip needs open-clip-torch>={floor}, and 2.32.0 is installed: pip install -U 'open-clip-torch>={floor}'"]
        else:
            assert done.returncode == 0 and "clip" in done.stdout, done.stderr
