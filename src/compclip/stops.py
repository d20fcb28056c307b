"""A cluster's stop (SIGTERM, SIGUSR1) for every command but `train`, which answers it itself at a step boundary.

`answer()`, called by the command line, turns the signal into `errors.Stopped` in the main process: `finally` blocks
remove half-written files, finished files stay, and one line is printed. A worker ends quietly: a DataLoader's by
`worker_init` (`held()` defers the stop while a loader forks them, so they start with it blocked), a pool's (`pool`)
of the signal itself. A pool whose workers a stop ended is not terminated (`end_pool`): a worker may have died holding
the pool's queue lock, on which `Pool.terminate` would wait forever; the command leaves by `os._exit` instead.
"""
from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator

from .errors import Stopped

SIGNALS = frozenset((signal.SIGTERM, signal.SIGUSR1))  # how SLURM (--signal, scancel) and Kubernetes ask a job to stop
_state: dict[str, int | None] = {"main": None, "held": 0, "pending": None, "stopping": 0}


def _stop(signum: int, _frame) -> None:
    if os.getpid() != _state["main"]:  # a worker (a DataLoader's, or a pool's before its initializer ran) ends at once
        os._exit(0)
    if _state["held"]:
        _state["pending"] = signum
        return
    _state["stopping"] = signum
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
            _state["pending"], _state["stopping"] = None, pending
            raise Stopped(pending)


def stopping() -> bool:
    """Whether a stop is under way in this process: a `finally` block leaves pools to `end_pool`'s kill."""
    return bool(_state["stopping"])


def pool(workers: int):
    """A forked multiprocessing pool whose workers die of a stop, and of `Pool.terminate`'s SIGTERM, as a process
    without a handler does. A Python handler runs only between bytecodes: one that reaches a worker just as it blocks on
    the pool's queue lock (which `terminate()` holds) never runs, and `terminate()` then waits on that worker forever."""
    return multiprocessing.get_context("fork").Pool(workers, initializer=_pool_worker, initargs=(os.getpid(),))


def _pool_worker(parent: int) -> None:
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    _die_with(parent)


def _die_with(parent: int) -> None:
    """Linux: the kernel kills this worker when the thread that forked it ends. A pool replaces a worker that a stop
    killed at once, from its own thread, possibly after `end_children` looked; the replacement, orphaned, would keep the
    command's output pipes (and the pool's queue) open forever."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # no prctl: not Linux
        return
    if os.getppid() != parent:  # it ended before the request was made
        os._exit(0)


def end_pool(pool) -> None:
    """End a multiprocessing pool: `terminate()` normally; under a stop, kill its workers (and every other child) instead,
    and the command leaves by `os._exit` (`cli.main`), past the pool's own finaliser, which would wait on the same lock."""
    if pool is None:
        return
    if stopping():
        end_children()
        return
    pool.terminate()


def end_children() -> None:
    """Kill this process's children (pool and DataLoader workers): one forked after the stop reached the group never got
    it, and would outlive the command holding its output pipes open."""
    for child in multiprocessing.active_children():
        child.kill()


def worker_init(_worker: int) -> None:
    """A DataLoader worker's answer to a stop sent to the whole process group: it ends quietly, and the main process stops
    and says so. Without this the worker dies of the signal, and the loader's shutdown prints a traceback."""
    for sig in SIGNALS:
        signal.signal(sig, _stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
