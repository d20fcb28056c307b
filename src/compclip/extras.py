"""The dependencies, checked where a missing or too old one would end in a traceback: one line naming it, the version
needed and the install command, as transformers checks its own at import. The optional ones at the command that needs
one, their minimums pyproject.toml's extras (a test keeps them equal); the core ones as the command line starts, their
minimums compclip's own installed requirements. Each the oldest release the suite passes on (`make test-lowest`,
`make test-compat`)."""
from __future__ import annotations

import re
from importlib import metadata

from .errors import UsageError

# package: (oldest release that works, extra). transformers: before 5.4 the processor crops other pixels than open_clip's
# and before 5.18 a hub tokenizer does not load offline from a cache that records the repository has no config.json;
# wandb: before 0.30 a W&B that cannot start prints Sentry's retries on a machine without network.
MINIMUM = {"transformers": ("5.18", "hf"), "wandb": ("0.30", "wandb")}


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string ("5.4.0.dev0" → (5, 4, 0)), enough to compare with a minimum."""
    found = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in found.group().split(".")) if found else ()


def need(package: str, what: str) -> None:
    """Refuse `what` (a flag or command, as the user typed it) unless `package` is installed at its minimum or newer."""
    minimum, extra = MINIMUM[package]
    require(what, package, minimum, f"compclip[{extra}]")


def require(what: str, package: str, minimum: str, install: str) -> None:
    """Refuse `what` unless `package` is installed at `minimum` or newer, naming what to `pip install`."""
    try:
        found = metadata.version(package)
    except metadata.PackageNotFoundError:
        raise UsageError(f"{what} needs {package}>={minimum}, which is not installed: pip install '{install}'") from None
    if release(found) < release(minimum):
        raise UsageError(f"{what} needs {package}>={minimum}, and {found} is installed: pip install -U '{install}'")


def check_core(distribution: str = "compclip") -> None:
    """Refuse to start where a core dependency is older than `distribution`'s own requirement says (a `--no-deps`
    install into an image with its own packages): open_clip 2.x, say, ends deep inside a model's construction otherwise.
    Nothing is checked where compclip runs from a source tree without being installed."""
    try:
        required = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return
    for requirement in required:
        floor = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*>=\s*([0-9][0-9.]*)\s*(?:,[^;]*)?", requirement)
        if floor is None:  # an extra's (`; extra == ...`), or one without a floor
            continue
        name, minimum = floor.groups()
        require("compclip", name, minimum, f"{name}>={minimum}")
