"""docs/api.md as a user reads it: every example runs as written, and every public name of the library's modules is
on the page."""
import importlib
import re
from pathlib import Path

import pytest

API = Path(__file__).resolve().parents[1] / "docs" / "api.md"
BLOCKS = dict(re.findall(r"<!-- example: ([\w-]+) -->\n```python\n(.*?)```", API.read_text(encoding="utf-8"), re.S))
PUBLIC = ("compclip", "compclip.methods", "compclip.gather", "compclip.eval", "compclip.train.optim")


def test_every_public_name_is_on_the_page():
    text = API.read_text(encoding="utf-8")
    missing = [f"{module}.{name}" for module in PUBLIC for name in importlib.import_module(module).__all__
               if name != "__version__" and not re.search(rf"\b{re.escape(name)}\b", text)]
    assert not missing, f"docs/api.md does not name {missing}"


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_the_example_runs_as_written(name, swap_root, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COMPCLIP_DATA", str(swap_root))
    exec(compile(BLOCKS[name], f"docs/api.md:{name}", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.strip()  # each example shows what it made


def test_the_page_has_its_examples():
    assert {"plain-loop", "c2lip", "negatives", "gather", "method", "evaluate", "harness", "optim"} <= set(BLOCKS)
