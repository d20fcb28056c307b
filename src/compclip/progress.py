"""Progress bars and logging that every command shares, silenced by `--quiet`."""
from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")
_QUIET = os.environ.get("COMPCLIP_QUIET", "") not in ("", "0")


def configure(quiet: bool = False, verbose: bool = False) -> None:
    """Set up logging once for the CLI; `quiet` also hides progress bars."""
    global _QUIET
    _QUIET = quiet
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    # open_clip logs every step of a model build at INFO on the root logger: keep that at
    # WARNING unless --verbose, and give compclip's own loggers the chosen level.
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s", force=True)
    for handler in logging.getLogger().handlers:  # the console shows the chosen level, whatever a run's log file records
        handler.setLevel(level)
    logging.getLogger("compclip").setLevel(level)


def is_quiet() -> bool:
    return _QUIET


def progress(iterable: Iterable[T], desc: str, total: int | None = None, unit: str = "it") -> Iterator[T]:
    """A tqdm bar unless `--quiet`; rates show in `unit`/s."""
    return iter(tqdm(iterable, desc=desc, total=total, unit=unit, disable=_QUIET, dynamic_ncols=True))
