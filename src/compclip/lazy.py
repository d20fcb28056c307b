"""A package's heavy names loaded on first use (PEP 562), so that its light declarations import alone."""
from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_names(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports `where[name]` (a submodule, relative; `module:attribute` where the
    name differs there) when `name` is first read."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = where[name].partition(":")
        return getattr(import_module(module, package), attribute or name)

    return __getattr__
