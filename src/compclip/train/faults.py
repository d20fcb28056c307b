"""What goes wrong mid-run, handled apart from the loop: stop signals (a cluster's preemption), steps whose loss or
gradients are not finite, and a collective that another rank broke off."""
from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
import torch.distributed as dist

from .. import stops
from ..errors import NonFiniteError, PeerLost
from .distributed import DistEnv

log = logging.getLogger("compclip.train")

# gloo's and NCCL's own words for a collective that broke off or timed out, with or without their source location
# ("[.../gloo/transport/tcp/pair.cc:545] Read error ..."): gloo/transport/tcp/unbound_buffer.cc raises "Timed out waiting
# Nms for recv operation to complete" in the operation that timed out and "Application timeout caused pair closure" in
# every other one then pending, as DDP's gradient buckets are
COLLECTIVE_FAILURES = ("gloo", "NCCL", "ProcessGroup", "Timed out waiting", "Application timeout caused pair closure",
                       "Connection closed by peer", "Connection reset by peer")


def collective_failed(e: RuntimeError) -> bool:
    """A collective that broke off or timed out: torch's DistError, or gloo's and NCCL's own RuntimeErrors."""
    return isinstance(e, dist.DistError) or any(words in str(e) for words in COLLECTIVE_FAILURES)


def first_line(e: Exception) -> str:
    """An error's first sentence without the library's source location: "Read error [127.0.0.1]:5858: Connection reset by
    peer" of gloo's "[.../pair.cc:545] Read error [127.0.0.1]:5858: Connection reset by peer. This is typically ..."."""
    line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    line = line.split("] ", 1)[1] if line.startswith("[") and "] " in line else line
    return line.split(". ", 1)[0]


def peer_lost(e: RuntimeError, env: DistEnv, step: int, latest: Path | None, timeout: float | None) -> PeerLost | None:
    """The one-line error of a collective that another rank broke off (it died, or hung past --dist-timeout), or None
    for any other error (a bug stays a traceback)."""
    if not env.distributed or not collective_failed(e):
        return None
    kept = f"the last checkpoint is {latest}" if latest else "no checkpoint was written yet"
    return PeerLost(f"rank {env.rank} of {env.world_size}: a collective with the other ranks failed at step {step + 1}, as when "
                    f"another rank died, or hung past --dist-timeout {timeout} s ({first_line(e)}); {kept}: run the same command "
                    "on every node to resume")


class StopSignals:
    """SIGTERM and SIGUSR1 ask the run to stop at the next step boundary. `flag` tells the DataLoader workers
    (`worker_init`), which leave the signal to the trainer; outside the main thread (a caller's) signals stay as they are.
    With `announce` (rank 0) the arrival is said at once, in one line naming the step the run finishes first: a step of
    many micro-batches may last minutes."""

    def __init__(self, announce: bool = False):
        self.flag = multiprocessing.Value("b", 0)
        self.signal: int | None = None
        self.announce = announce
        self.checked = 0  # the last step whose boundary asked whether to stop (`asked`): a stop now ends the next one

    @contextlib.contextmanager
    def installed(self, at_step: int = 0) -> Iterator[None]:
        """The handlers, for a run that starts (or resumes) after step `at_step`."""
        self.signal, self.checked = None, at_step
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        above_a_bar = "\n" if sys.stderr.isatty() else ""  # a terminal's progress bar holds the current line

        def note(signum, _frame):
            if self.announce and self.signal is None:
                say(f"{above_a_bar}stop signal {signal.Signals(signum).name} received: finishing step {self.checked + 1}, "
                    "then saving\n")
            self.signal = signum
            self.flag.value = 1

        previous = {sig: signal.signal(sig, note) for sig in stops.SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def asked(self, env: DistEnv, step: int) -> int | None:
        """The stop signal any rank received by the boundary of step `step` (all ranks agree, so they stop at the same
        step), or None."""
        self.checked = step
        asked = self.signal or 0
        if env.distributed:
            flag = torch.tensor([asked], device=env.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            asked = int(flag.item())
        return asked or None


def say(text: str) -> None:
    """`text` on stderr from a signal handler: one `os.write` of its bytes, which takes no lock (logging's, or the
    stream's buffer lock held by the code the signal interrupted, would deadlock or raise)."""
    with contextlib.suppress(OSError):  # stderr closed or full: the stop itself still goes on
        os.write(2, text.encode())


def worker_init(stopping, _worker: int) -> None:
    """In a DataLoader worker: a stop signal sent to the whole process group is the trainer's to answer, at a step boundary
    (a worker that died of it first would end the run in a traceback). The trainer raises `stopping` when it gets one; a
    SIGTERM it did not get is DataLoader's own way of ending a worker, which then ends as it would have."""
    def on_signal(signum, _frame):
        for _ in range(80):  # the group's signal reaches the trainer at about the same moment
            if stopping.value:
                return
            time.sleep(0.025)
        os._exit(0)  # asked by the loader or at exit: end without a death by signal, which the trainer would report

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # only a cluster sends it


class NonFiniteGuard:
    """--skip-nonfinite N: a step whose loss or gradient is NaN or inf makes no update, warned; the (N+1)-th stops the run
    before its update. Under fp16 loss scaling the scaler itself skips steps whose gradients overflow."""

    def __init__(self, allowed: int, checkpoints: Path):
        self.allowed, self.checkpoints, self.skipped = allowed, checkpoints, 0

    def skips(self, step: int, terms: dict[str, float], named: Iterable[tuple[str, torch.nn.Parameter]], scaled: bool) -> bool:
        """Whether step `step` (0-based) is skipped; raises `NonFiniteError` past the allowance."""
        problem = nonfinite(terms, named, scaled)
        if problem is None:
            return False
        self.skipped += 1
        if self.skipped > self.allowed:
            raise NonFiniteError(f"step {step + 1}: {problem}: training stopped before the update (checkpoints under "
                                 f"{self.checkpoints} are untouched). Lower --lr, or let --skip-nonfinite N skip up to N such steps")
        log.warning("step %d: %s: skipped, no update (%d of --skip-nonfinite %d)", step + 1, problem, self.skipped, self.allowed)
        return True


def nonfinite(terms: dict[str, float], named: Iterable[tuple[str, torch.nn.Parameter]], scaled: bool) -> str | None:
    """What is NaN or inf in this step (a loss term, else a gradient, unless the loss is `scaled`), or None."""
    bad = next((k for k, v in terms.items() if not math.isfinite(v)), None)
    if bad is not None:
        return f"loss term {bad} is {terms[bad]}"
    if scaled:
        return None
    params = [(n, p) for n, p in named if p.grad is not None]
    norms = torch._foreach_norm([p.grad for _, p in params]) if params else []
    finite = torch.isfinite(torch.stack(norms)) if norms else torch.ones(0, dtype=torch.bool)
    if bool(finite.all()):
        return None
    return f"the gradient of {params[int((~finite).nonzero()[0])][0]} is not finite"
