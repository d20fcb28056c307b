"""One kind of registry for what compclip is extended with (methods, benchmarks, data formats), as timm registers models.

A `Registry` maps names to records. It fills itself on first read: it imports every module of the package that
holds the shipped kind (each module registers what it declares, so adding one is adding a file) and every installed
package's entry points of its group (`pyproject.toml`: `[project.entry-points."compclip.benchmarks"]`), as pytest and
timm find their plugins. No module names its registry's members, so nothing imports back up.
"""
from __future__ import annotations

import pkgutil
from collections.abc import Iterator
from importlib import import_module
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from .errors import UsageError

T = TypeVar("T")


class Registry(Generic[T]):
    """Records of one kind by name. `kind` names it in messages ("benchmark"); `package` holds the shipped ones, a
    module each (a module that declares none, such as a helper its neighbours share, is imported all the same);
    `group` is the entry-point group."""

    def __init__(self, kind: str, package: str, group: str):
        self.kind, self.package, self.group = kind, package, group
        self._records: dict[str, T] = {}
        self._filled = False

    def register(self, name: str, record: T) -> T:
        """Add `record` as `name` (a second record under one name is an error: a plugin cannot shadow a shipped one)."""
        if name in self._records:
            raise ValueError(f"{self.kind} {name!r} is registered already")
        self._records[name] = record
        return record

    def remove(self, name: str) -> T:
        """Take `name` out again (a plugin's own test, registering a method for its length)."""
        return self._records.pop(name)

    def _fill(self) -> None:
        if self._filled:
            return
        self._filled = True  # first: a module being imported may read the registry
        package = import_module(self.package)
        for module in pkgutil.iter_modules(package.__path__):
            if not module.name.startswith("_"):
                import_module(f"{self.package}.{module.name}")
        for entry in entry_points(group=self.group):
            try:
                entry.load()
            except Exception as e:  # a broken plugin names itself instead of failing somewhere inside compclip
                raise UsageError(f"the {self.group} plugin {entry.name!r} ({entry.value}) failed to load: {e}") from e

    def names(self) -> list[str]:
        self._fill()
        return sorted(self._records)

    def __getitem__(self, name: str) -> T:
        """The record `name`; an unknown name is a UsageError with the nearest names and every known one."""
        self._fill()
        if name not in self._records:
            from .text import did_you_mean

            raise UsageError(f"unknown {self.kind} {name!r}{did_you_mean(name, self._records, n=2)}; known: {', '.join(self.names())}")
        return self._records[name]

    def __contains__(self, name: object) -> bool:
        self._fill()
        return name in self._records

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._fill()
        return len(self._records)

    def items(self) -> list[tuple[str, T]]:
        """(name, record) by name."""
        return [(name, self._records[name]) for name in self.names()]

    def values(self) -> list[T]:
        return [record for _, record in self.items()]
