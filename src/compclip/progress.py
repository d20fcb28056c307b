"""Progress bars and logging that every command shares, silenced by `--quiet`."""
from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm.std import tqdm

T = TypeVar("T")
_QUIET = os.environ.get("COMPCLIP_QUIET", "") not in ("", "0")


class _Console(logging.StreamHandler):
    """The console's log handler: it writes to `sys.stderr` as it is at each record, not as it was when logging was set
    up. A caller that replaces stderr after `configure` (pytest's capture, a notebook's cell, `contextlib.redirect_stderr`)
    gets the lines; a handler bound to the stream of that moment wrote to it after it was closed ("--- Logging error ---
    ValueError: I/O operation on closed file") and the line was lost."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)  # (StreamHandler's would set a stream of its own)

    @property
    def stream(self):
        return sys.stderr


def configure(quiet: bool = False, verbose: bool = False) -> None:
    """Set up logging once for the CLI; `quiet` also hides progress bars."""
    global _QUIET
    _QUIET = quiet
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    # open_clip logs every step of a model build at INFO on the root logger: keep that at
    # WARNING unless --verbose, and give compclip's own loggers the chosen level.
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s",
                        handlers=[_Console()], force=True)
    for handler in logging.getLogger().handlers:  # the console shows the chosen level, whatever a run's log file records
        handler.setLevel(level)
    logging.getLogger("compclip").setLevel(level)


def is_quiet() -> bool:
    return _QUIET


LINE_EVERY = 60.0  # seconds between progress lines where stderr is not a terminal
QUIET_UNDER = 10.0  # seconds: there, a bar done sooner prints nothing (the stage that ran it says what was done)


def progress(iterable: Iterable[T], desc: str, total: int | None = None, unit: str = "it", leave: bool = True) -> Iterator[T]:
    """A tqdm bar unless `--quiet`; rates show in `unit`/s; `leave` False clears it from the terminal once done. Where
    stderr is a file or a pipe (a log, a batch job), a bar's every redraw would be one more line of it: there, one line
    a minute and one at the end, none for a bar done within `QUIET_UNDER` seconds (an evaluation's dozens of short bars
    would fill the log)."""
    if _QUIET:
        return iter(iterable)
    if in_notebook():
        return _LoggingAbove(_notebook_bar()(iterable, desc=desc, total=total, unit=unit, leave=leave))
    if sys.stderr.isatty():
        return _LoggingAbove(tqdm(iterable, desc=desc, total=total, unit=unit, dynamic_ncols=True, leave=leave))
    return _lines(iterable, desc, total, unit)


ON_THE_BAR = "on_the_bar"  # a log record with this attribute set (`extra=`) says what a live bar shows: not written above it


class _AboveTheBar(logging.Handler):
    """A console handler's records written through `tqdm.write`: on a line of their own above a live bar, not after it."""

    def __init__(self, console: logging.StreamHandler):
        super().__init__(console.level)
        self.console = console
        self.setFormatter(console.formatter)
        self.filters = list(console.filters)

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, ON_THE_BAR, False):  # a training step's line: its figures are the bar's own (`set_postfix`)
            return
        try:
            tqdm.write(self.format(record), file=self.console.stream)
        except Exception:  # as logging's own handlers: a record that cannot be written does not end the work
            self.handleError(record)


class _LoggingAbove(Iterator[T]):
    """Iterate `bar` with the root logger's console handlers writing above it (tqdm.contrib.logging's idea, keeping each
    handler's level, which `configure` sets); `set_postfix` shows figures on the bar itself (a training run's loss)."""

    def __init__(self, bar):
        self._bar = bar
        self._items = self._iterate()

    def __next__(self) -> T:
        return next(self._items)

    def set_postfix(self, **figures: str) -> None:
        self._bar.set_postfix(figures)

    def _iterate(self) -> Iterator[T]:
        root = logging.getLogger()
        before = root.handlers
        during = root.handlers = [_AboveTheBar(h) if type(h) in (_Console, logging.StreamHandler) and h.stream in (sys.stderr, sys.stdout)
                                  else h for h in before]
        try:
            yield from self._bar
        finally:
            if root.handlers is during:  # (not where logging was set up anew meanwhile, or a bar left unfinished ends late)
                root.handlers = before


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (tqdm.autonotebook's test): its stderr is no terminal, yet it redraws a bar."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def _notebook_bar() -> type:
    """tqdm's widget where ipywidgets can draw it; else its text bar, which a notebook redraws in place as well. (tqdm.auto
    there without ipywidgets warns "IProgress not found" and prints a line per update.)"""
    import importlib.util

    if importlib.util.find_spec("ipywidgets") is None:
        return tqdm
    from tqdm.notebook import tqdm as widget

    return widget


def _lines(iterable: Iterable[T], desc: str, total: int | None, unit: str) -> Iterator[T]:
    start = last = time.monotonic()
    done = shown = 0
    for done, item in enumerate(iterable, 1):
        yield item
        if time.monotonic() - last >= LINE_EVERY:
            last, shown = time.monotonic(), done
            print(tqdm.format_meter(done, total, last - start, prefix=desc, unit=unit), file=sys.stderr, flush=True)
    if done != shown and time.monotonic() - start >= QUIET_UNDER:
        print(tqdm.format_meter(done, total, time.monotonic() - start, prefix=desc, unit=unit), file=sys.stderr, flush=True)


class Stages:
    """A bar over a command's few long steps (`export`: load, convert and check, write), so a minute's work is not silent:
    `done()` after each, the bar closed when the block ends."""

    def __init__(self, desc: str, count: int):
        self._bar = progress(iter(range(count)), desc, total=count, unit="stage")
        next(self._bar, None)  # the bar shows from the first stage's start

    def done(self) -> None:
        next(self._bar, None)

    def __enter__(self) -> Stages:
        return self

    def __exit__(self, failed: type | None, *_: object) -> None:
        if failed is None:  # a step that failed leaves the bar where it stopped
            for _ in self._bar:
                pass
