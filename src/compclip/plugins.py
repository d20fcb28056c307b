"""Methods and benchmarks from other packages, found through entry points, as pytest and timm find theirs."""
from __future__ import annotations

from importlib.metadata import entry_points

from .errors import UsageError


def load_plugins(group: str) -> None:
    """Import the module each entry point of `group` names: importing it registers what it declares
    (`register_method`, `@register`), so an installed plugin appears everywhere with no edit to compclip."""
    for entry in entry_points(group=group):
        try:
            entry.load()
        except Exception as e:  # a broken plugin names itself instead of failing somewhere inside compclip
            raise UsageError(f"the {group} plugin {entry.name!r} ({entry.value}) failed to load: {e}") from e
