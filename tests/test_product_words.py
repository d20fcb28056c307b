"""Every text a user sees speaks of compclip and its sources, never of how the project was built: the CLI's help and its
listing commands' output, the registry's entries, the recipes, the papers' tables, the docstrings and messages in the
source, the docs and the benchmark scripts. A source is cited by repository, file and commit, not by how it was read."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
PROCESS_WORDS = re.compile(
    r"\b(sessions?|issues?\b ?#?\d*|read_file|find_string|find_files|via search|search results?|not at hand|stored commit|"
    r"subagents?|this turn|last turn)\b|\bfetched(?: commit)? [0-9a-f]{7}|[(,] fetched\)|\(fetched\)", re.IGNORECASE)
TEMPORARY = re.compile(r"/tmp/")  # a doc line citing a scratch folder of the machine it was written on


def hits(text: str, pattern: re.Pattern = PROCESS_WORDS) -> list[str]:
    return [f"{n}: {line.strip()[:160]}" for n, line in enumerate(text.splitlines(), 1) if pattern.search(line)]


def shipped_files() -> list[Path]:
    src = ROOT / "src" / "compclip"
    return sorted([*src.rglob("*.py"), *src.rglob("*.json"), *(ROOT / "benchmarks").glob("*.py"), *(ROOT / "research").glob("*.py"),
                   ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


def test_the_pattern_finds_what_it_is_for_and_passes_plain_text():
    assert hits("licence: the Hub card, seen via search") and hits("Target (issue 4): 10x") and hits("read via read_file, commit a9c")
    assert hits("README (fetched d05afc4)") and hits("(Llip LICENSE, fetched)") and not hits("its weights file fetched into the cache")
    assert hits("the paper's text was not at hand") and hits("cut this session")
    assert not hits("open_clip's registry names the Hub repository (commit 81fdd20)") and not hits("a tissue of lies")


@pytest.mark.parametrize("path", shipped_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_shipped_text_speaks_of_how_it_was_built(path: Path):
    text = path.read_text(encoding="utf-8")
    assert not hits(text), f"{path.relative_to(ROOT)}:\n" + "\n".join(hits(text))
    if path.suffix == ".md":
        assert not hits(text, TEMPORARY), f"{path.relative_to(ROOT)} cites a scratch folder:\n" + "\n".join(hits(text, TEMPORARY))


def command_texts() -> dict[str, str]:
    """`--help` of every command and group, and the output of the listing commands, as `compclip` prints them."""
    from compclip.cli import app

    runner = CliRunner()
    texts = {}
    for args in (["--help"], ["models"], ["methods"], ["benchmarks"], ["recipes"]):
        texts[" ".join(args)] = runner.invoke(app, args, env={"HF_HUB_OFFLINE": "1"}).output
    groups = [(name or "", group.typer_instance) for group in app.registered_groups for name in [group.name]]
    for name, command in [*((c.name or c.callback.__name__, None) for c in app.registered_commands), *groups]:
        texts[f"{name} --help"] = runner.invoke(app, [name.replace("_", "-"), "--help"]).output
        if command is not None:
            for sub in command.registered_commands:
                sub_name = (sub.name or sub.callback.__name__).replace("_", "-")
                texts[f"{name} {sub_name} --help"] = runner.invoke(app, [name, sub_name, "--help"]).output
    return texts


def test_no_command_output_speaks_of_how_it_was_built():
    texts = command_texts()
    assert len(texts) > 20 and all(texts.values())
    found = {args: hits(text) for args, text in texts.items() if hits(text)}
    assert not found, found


def test_the_front_page_is_short_and_reaches_a_command_early():
    """README: at most 300 lines, its first `compclip` command within 40, and it names what compclip is for today."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300
    first = next(n for n, line in enumerate(lines, 1) if line.startswith("compclip "))
    assert first <= 40
    head = "\n".join(lines[:first])
    for words in ("CE-CLIP", "SVLC", "DAC", "CoN-CLIP", "TripletCLIP", "released checkpoints", "sweep", "transformers"):
        assert words in head, words


def test_the_speed_reference_holds_todays_figures_and_leaves_the_history_to_its_file():
    """docs/benchmarks.md is a reference (each target, its command, the latest figure): at most about 700 lines."""
    lines = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 700
    assert "benchmarks-history.md" in "\n".join(lines)
