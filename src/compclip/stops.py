"""A cluster's stop (SIGTERM, SIGUSR1) for every command but `train`, which answers it itself at a step boundary.

`answer()`, called by the command line, turns the signal into `errors.Stopped` in the main process: `finally` blocks
remove half-written files, finished files stay, and one line is printed; a forked worker ends quietly. `held()` defers
it while a DataLoader forks its workers, which start with it blocked and take it once `worker_init` is in place.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

from .errors import Stopped

SIGNALS = frozenset((signal.SIGTERM, signal.SIGUSR1))
_state: dict[str, int | None] = {"main": None, "held": 0, "pending": None}


def _stop(signum: int, _frame) -> None:
    if os.getpid() != _state["main"]:  # a forked worker: the main process says what happened
        os._exit(0)
    if _state["held"]:
        _state["pending"] = signum
        return
    raise Stopped(signum)


def answer() -> None:
    """Make a stop end this process as an error would, not as a kill (the main thread only: signals reach no other)."""
    if threading.current_thread() is threading.main_thread():
        _state["main"] = os.getpid()
        for sig in SIGNALS:
            signal.signal(sig, _stop)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Defer a stop while the block forks workers: they inherit the blocked mask, and the main process takes the stop
    after the block, on a whole object (a stop delivered to another thread still runs the main thread's handler)."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    _state["held"] += 1
    try:
        yield
    finally:
        _state["held"] -= 1
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        pending = _state["pending"]
        if pending and not _state["held"]:
            _state["pending"] = None
            raise Stopped(pending)


def worker_init(_worker: int) -> None:
    """A DataLoader worker's answer to a stop sent to the whole process group: it ends quietly, and the main process stops
    and says so. Without this the worker dies of the signal, and the loader's shutdown prints a traceback."""
    for sig in SIGNALS:
        signal.signal(sig, _stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
