"""DataLoader workers hand their batches to the main process through shared memory (`/dev/shm`). A batch that does not
fit there fails inside a worker's queue thread and is lost without an error reaching the main process, which then
waits for it forever (and a stop signal, handled between steps, never gets its turn). Containers often give
`/dev/shm` 64 MiB; so the room is checked before any worker starts."""
from __future__ import annotations

import os

from ..errors import UsageError

SHM = "/dev/shm"
IN_FLIGHT = 2  # batches each worker prepares ahead: DataLoader's prefetch_factor, its default


def check_shared_memory(workers: int, batch_bytes: int, what: str, path: str = SHM) -> None:
    """Refuse `workers` DataLoader workers whose batches (of `batch_bytes` each, `IN_FLIGHT` per worker) would not fit in
    the free shared memory, in one line that names the room, the need and the three ways on."""
    if workers <= 0:
        return
    try:
        st = os.statvfs(path)
    except OSError:  # no /dev/shm to measure (another OS): torch reports what it meets
        return
    free, need = st.f_bavail * st.f_frsize, workers * IN_FLIGHT * batch_bytes
    if free < need:
        mib = lambda n: f"{n / (1 << 20):,.1f} MiB"  # noqa: E731
        raise UsageError(f"{path} has {mib(free)} free, and {workers} DataLoader workers would pass {what} through it, about "
                         f"{mib(need)} at a time: give the job more shared memory (docker run --shm-size, a cluster's "
                         "/dev/shm), lower --batch-size, or fewer --workers (0 reads in the main process)")
