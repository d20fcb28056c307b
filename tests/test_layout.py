"""The package's layers: every import, at module top or inside a function, runs downward, and no module imports
itself back through others. Read from the source with `ast`, so an import hidden in a function counts too."""
import ast
from pathlib import Path

import compclip

# Lowest first. A module may import its own layer and those before it; the shared helpers (errors, io, options,
# precision, progress, text) import none of the layers.
# training runs the harness on its model
LAYERS = ("data", "concepts", "models", "scoring", "transformers_scoring", "methods", "eval", "train")
HELPERS = ("errors", "io", "lazy", "options", "plugins", "precision", "progress", "stats", "stops", "text")


def imports(root: Path) -> dict[str, set[str]]:
    """{module: the modules of the package at `root` it imports}, relative imports resolved."""
    def name_of(path: Path) -> str:
        parts = path.relative_to(root.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {name_of(p) for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        name = name_of(path)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        found = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.split(".")[0] == root.name}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    kept = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(kept + ([base] if base else []))
                if base.split(".")[0] == root.name:  # `from .x import y` may name a module y or a name in x
                    found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
    return graph


def layer(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def upward(graph: dict[str, set[str]]) -> list[str]:
    rank = {name: k for k, name in enumerate(LAYERS)}
    found = []
    for module, targets in graph.items():
        for target in targets:
            here, there = layer(module), layer(target)
            if there in rank and (here in HELPERS or (here in rank and rank[there] > rank[here])):
                found.append(f"{module} -> {target}")
    return sorted(found)


def cycles(graph: dict[str, set[str]]) -> list[str]:
    found = set()

    def visit(module, path):
        for target in graph.get(module, ()):
            if target in path:
                found.add(" -> ".join([*path[path.index(target):], target]))
            elif target in graph:
                visit(target, [*path, target])

    for module in graph:
        visit(module, [module])
    return sorted(found)


def test_every_import_runs_downward_and_none_comes_back():
    graph = imports(Path(compclip.__file__).parent)
    assert len(graph) > 60 and "compclip.scoring" in graph["compclip.methods.occlip"]  # it reads the real tree
    assert upward(graph) == []
    assert cycles(graph) == []


def test_the_check_sees_imports_inside_functions(tmp_path):
    """A package with an arrow up hidden in a function, and a circle, is caught on both counts."""
    root = tmp_path / "compclip"
    for file, text in {"__init__.py": "", "errors.py": "", "methods/__init__.py": "from . import occlip\n",
                       "methods/occlip.py": "from ..errors import E\n\ndef scorer():\n    from ..eval.scorer import GraphScorer\n",
                       "eval/__init__.py": "", "eval/scorer.py": "from ..methods import occlip\n"}.items():
        (root / file).parent.mkdir(parents=True, exist_ok=True)
        (root / file).write_text(text)
    graph = imports(root)
    assert graph["compclip.methods.occlip"] == {"compclip.errors", "compclip.eval.scorer"}
    assert upward(graph) == ["compclip.methods.occlip -> compclip.eval.scorer"]
    assert cycles(graph) and all("compclip.eval.scorer -> compclip.methods" in c or "occlip" in c for c in cycles(graph))


def test_the_readme_links_work_from_the_package_index():
    """The package index shows README.md without the repository around it: a link to the docs is absolute, at the
    repository `[project.urls]` names, and names a file (and heading) of this tree."""
    import re

    root = Path(__file__).parents[1]
    repository = re.search(r'^Repository = "(.+)"$', (root / "pyproject.toml").read_text(), flags=re.M).group(1)
    readme = (root / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert not [t for t in targets if not t.startswith(("http://", "https://", "#"))]  # no relative link
    ours = [t.removeprefix(f"{repository}/blob/main/") for t in targets if t.startswith(repository)]
    assert len(ours) >= 10
    for target in ours:
        file, _, anchor = target.partition("#")
        assert (root / file).is_file(), target
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (root / file).read_text(encoding="utf-8"), flags=re.M)
            slugs = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
            assert anchor in slugs, target
