"""Atomic file writes: a crash never leaves a half-written result behind, what is written has the mode `open()` would
give it under the process's umask, and a write the file system refuses (full disk, quota, read-only, permission) is
one `StorageError` naming the file and what was kept. Files compclip appends to or locks in place are opened without
following a link planted there, and a folder's lock names its owner."""
from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import hashlib
import itertools
import json
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import stops
from .errors import DataError, StorageError, UsageError

FULL = -1  # torch.save's writer reports a failed write without its errno: a full disk or quota, as far as it says
WHY = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up", errno.EROFS: "the file system is read-only",
       errno.EACCES: "permission denied", errno.EPERM: "permission denied", FULL: "the disk is full or the quota used up",
       errno.EFBIG: "the file would pass this process's file-size limit (ulimit -f)",
       errno.ENOTDIR: "a folder on its path is a file"}


def _storage_errno(e: BaseException) -> int | None:
    """The file-system reason behind a failed write, from an `OSError`, safetensors' "os error N" (its older releases: the Rust
    debug form, "Os { code: N, ..."), or torch.save's writer."""
    if isinstance(e, OSError) and e.errno in WHY:
        return e.errno
    found = re.search(r"os error (\d+)|Os \{ code: (\d+)", str(e))
    code = int(found.group(1) or found.group(2)) if found else None
    if code in WHY:
        return code
    if isinstance(e, RuntimeError) and ("unexpected pos" in str(e) or "file write failed" in str(e)):
        return FULL
    return None


@contextmanager
def storage_errors(path: str | os.PathLike) -> Iterator[None]:
    """Turn a write the file system refused into one line naming `path`, why, and what is still there."""
    try:
        yield
    except Exception as e:
        code = _storage_errno(e)
        if code is None:
            raise
        path = Path(path)
        kept = f"the earlier {path.name} there is as it was" if path.exists() else "nothing was written there"
        detail = e.strerror if isinstance(e, OSError) and e.strerror else str(e).strip().splitlines()[-1][:120]
        raise StorageError(f"{path}: not written: {WHY[code]} ({detail}); {kept}") from None


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (`/proc/self/status`)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _as_open_would(path: Path) -> None:
    """Give a written file or folder, and for a folder everything in it, the mode `open()` or `mkdir()` would have given
    it: `mkstemp`, `mkdtemp` and safetensors' `save_file` make them private (0600, 0700), which a rename keeps, so a
    group-shared project folder could not read a result."""
    mask = _umask()
    os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)
    if path.is_dir():
        for root, folders, files in os.walk(path):
            for name in folders:
                os.chmod(os.path.join(root, name), 0o777 & ~mask)
            for name in files:
                os.chmod(os.path.join(root, name), 0o666 & ~mask)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    """Put every regular file under `folder` on disk, then each folder below it and `folder` itself: what torch and
    safetensors write into a checkpoint's temporary folder (its weights, its training state) is not synced by them, and a
    rename made durable before its contents would leave, after a power loss, a checkpoint named but empty."""
    for root, _, files in os.walk(folder, topdown=False):
        for name in files:
            file = Path(root, name)
            if file.is_file() and not file.is_symlink():
                _fsync(file)
        _fsync(Path(root))


def _owned_prefix(path: Path) -> str:
    """The start of a temporary sibling's name: it names the process that made it, so a later writer of the same path
    on this host can tell one left by a killed process (SIGKILL runs no `finally`) from one still being written."""
    return f".{path.name}.{socket.gethostname()}-{os.getpid()}."


def _remove_left_behind(path: Path) -> None:
    """Remove the temporary siblings of `path` that a process on this host, no longer running, made and left: a model
    copy of an export or a checkpoint killed mid-write is otherwise never removed."""
    made = re.compile(re.escape(f".{path.name}.{socket.gethostname()}-") + r"(\d+)\.[A-Za-z0-9_]+\.(tmp|old)")
    for entry in path.parent.iterdir() if path.parent.is_dir() else ():
        found = made.fullmatch(entry.name)
        if found is None or entry.is_symlink() or _alive(int(found.group(1))):
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _owner() -> str:
    return f"host {socket.gethostname()}, pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}"


def _gone(owner: str) -> bool:
    """Whether a lock's owner (as `_owner` wrote it) was a process of this host that has ended."""
    found = re.match(r"host (\S+), pid (\d+),", owner)
    return found is not None and found.group(1) == socket.gethostname() and not _alive(int(found.group(2)))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@contextmanager
def _sibling(path: Path, folder: bool) -> Iterator[Path]:
    """A new temporary sibling of `path` (a folder, or a file), named for this process, removed when the block ends unless
    renamed meanwhile; the siblings killed writers of `path` on this host left are removed first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_left_behind(path)
    tmp = None
    try:
        with stops.held():  # a stop between making the sibling and holding its name would leave it behind
            if folder:
                tmp = Path(tempfile.mkdtemp(prefix=_owned_prefix(path), suffix=".tmp", dir=path.parent))
            else:
                fd, name = tempfile.mkstemp(prefix=_owned_prefix(path), suffix=".tmp", dir=path.parent)
                tmp = Path(name)
                os.close(fd)
        yield tmp
    finally:
        if tmp is not None and tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp)
        elif tmp is not None:
            tmp.unlink(missing_ok=True)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling of `path`; on success it replaces `path` in one rename."""
    path = Path(path)
    with storage_errors(path), _sibling(path, folder=False) as tmp:
        yield tmp
        _as_open_would(tmp)
        _fsync(tmp)
        os.replace(tmp, path)


def sha256_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write strict JSON atomically (paths and other odd values are written as strings; NaN is refused)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, default=str, allow_nan=False) + "\n", encoding="utf-8")


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling folder that becomes `path` once everything in it is written.

    An existing `path` is exchanged with the new folder in one step (`_put_in_place`) and removed after, so a reader
    finds the old folder or the new one, whole, at every moment, never a mix and never none; a second writer of the same
    path meeting this one mid-way leaves one of the two whole folders. Everything in the folder is on disk before the
    rename, and the rename after it, so a power loss leaves the old folder or the whole new one.
    """
    path = Path(path)
    with storage_errors(path), _sibling(path, folder=True) as tmp:
        yield tmp
        _as_open_would(tmp)
        _fsync_tree(tmp)
        _put_in_place(tmp, path)
        _fsync(path.parent)  # the rename itself


RENAME_EXCHANGE = 2  # renameat2(2)'s flag (linux/fs.h)
AT_FDCWD = -100


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    """Linux's renameat2 from the C library (glibc 2.28 and later), or None where there is none."""
    return getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)


def _exchanged(folder: Path, path: Path) -> bool | None:
    """Swap `folder` and the existing `path` in one step (renameat2's RENAME_EXCHANGE): `path` names the old folder until
    the instant it names the new, and `folder` then holds the old one. False where `path` is gone meanwhile; None where
    the system or its file system has no such exchange (another OS, NFS)."""
    swap = _renameat2()
    if swap is None:
        return None
    if swap(AT_FDCWD, os.fsencode(folder), AT_FDCWD, os.fsencode(path), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return None
    if code == errno.ENOENT:
        return False
    raise OSError(code, os.strerror(code), str(folder), None, str(path))


def _put_in_place(folder: Path, path: Path) -> None:
    """Make `folder` `path`: exchanged with an existing one (whose folder, now in `folder`, the caller removes), renamed
    where there is none. A folder another writer put at `path` between the two is met by `os.replace`'s refusal (a
    folder not empty) and exchanged in turn, so the later write wins and neither fails. Without the exchange the old
    `path` is first moved aside, into a `.old` sibling removed after, and a reader finds no `path` until the rename."""
    aside = None
    try:
        for attempt in itertools.count():
            if os.path.lexists(path):
                swapped = _exchanged(folder, path)
                if swapped:
                    return
                if swapped is None:
                    aside = aside or Path(tempfile.mkdtemp(prefix=_owned_prefix(path), suffix=".old", dir=path.parent))
                    with contextlib.suppress(FileNotFoundError):  # another writer moved it first
                        os.replace(path, aside / str(attempt))
            try:
                os.replace(folder, path)
                return
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
    finally:
        if aside is not None:
            shutil.rmtree(aside)


@contextmanager
def scratch_dir(path: str | os.PathLike) -> Iterator[Path]:
    """A working folder beside `path`, named for this process and removed when the block ends: what a command keeps on
    disk only while it runs. One that a killed process of this host left (SIGKILL runs no `finally`) is removed when the
    next is made. Its mode is `mkdir()`'s under the umask."""
    path = Path(path)
    with storage_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_left_behind(path)
        with stops.held():  # as in `atomic_path`
            tmp = Path(tempfile.mkdtemp(prefix=_owned_prefix(path), suffix=".tmp", dir=path.parent))
        _as_open_would(tmp)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _planted(path: Path) -> DataError:
    return DataError(f"{path}: a symbolic link (to {os.readlink(path)}) where compclip writes its own file; compclip does not "
                     "write through links it did not make (in a shared folder anyone with write access can plant one): remove it")


def refuse_links(folder: Path, names: tuple[str, ...]) -> None:
    """Refuse a symbolic link at any of `names` inside `folder`: writing into it, or deleting what it holds, would reach
    whatever the link points at."""
    for name in names:
        if (folder / name).is_symlink():
            raise _planted(folder / name)


def open_own(path: str | os.PathLike, flags: int, mode: int = 0o666) -> int:
    """`os.open` that never follows a symbolic link at `path` (`O_NOFOLLOW`), for files compclip appends to or truncates
    in place (a run's lock and logs); the mode is `open()`'s, under the umask."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _planted(Path(path)) from None
        raise


def append_line(path: str | os.PathLike, line: str) -> None:
    """Append one line to a log compclip owns, refusing a planted link there."""
    with storage_errors(path):
        fd = open_own(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(line + "\n")


# flock's errors where a filesystem keeps no locks (NFS mounted `nolock`, some FUSE filesystems)
NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)


class FolderLock:
    """An advisory lock (`flock`) on `FILE`, holding the owner's host, pid and start time. The kernel drops it when its
    process ends, however it ends, so a lock left by a killed process is taken over, never waited on; a second process
    is refused in one line naming the first (`place`, by default the lock's folder, then what to do: `then`), or with
    `wait` waits for it (a short critical section).

    The file takes `open()`'s mode under the umask, so a group sharing the folder (umask 002) shares its lock; a lock
    file another user left unwritable is locked read-only (flock needs no write access). Where the filesystem keeps
    no locks, a marker `FILE.held` created exclusively stands in: a killed owner's marker is taken over on its own
    host, and named with how to remove it from another."""

    def __init__(self, file: Path, what: str, wait: bool = False, place: str | None = None, then: str = "wait for it to finish"):
        self.file, self.what, self.wait, self.fd, self.marker = file, what, wait, None, None
        self.place, self.then = place or str(file.parent), then

    def acquire(self) -> FolderLock:
        with storage_errors(self.file):
            self.file.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd, writable = open_own(self.file, os.O_RDWR | os.O_CREAT), True
            except PermissionError:
                if not self.file.is_file():
                    raise
                fd, writable = open_own(self.file, os.O_RDONLY), False  # another user's lock file, not shared with us
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if self.wait else fcntl.LOCK_NB))
        except BlockingIOError:
            owner = os.read(fd, 4096).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise UsageError(f"{self.place} is in use by {self.what} ({owner}): {self.then}") from None
        except OSError as e:
            os.close(fd)
            if e.errno not in NO_LOCKS:
                raise
            return self._acquire_marker()
        if writable:
            os.ftruncate(fd, 0)
            os.write(fd, _owner().encode())
        self.fd = fd
        os.register_at_fork(after_in_child=self._forget)  # a forked worker must not keep the lock alive
        return self

    def _acquire_marker(self) -> FolderLock:
        """The lock where flock is refused: `FILE.held`, created only where it is not there (`O_EXCL`)."""
        marker = self.file.with_name(self.file.name + ".held")
        while True:
            try:
                with storage_errors(marker):
                    fd = open_own(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                try:
                    owner = marker.read_text(encoding="utf-8", errors="replace").strip()
                except FileNotFoundError:  # released meanwhile
                    continue
                if _gone(owner):
                    marker.unlink(missing_ok=True)
                    continue
                if self.wait:
                    time.sleep(0.05)
                    continue
                raise UsageError(f"{self.place} is in use by {self.what} ({owner or 'another process'}; this filesystem keeps no "
                                 f"locks, so {marker} marks it: if that process has ended, delete that file): {self.then}") from None
            os.write(fd, _owner().encode())
            os.close(fd)
            self.marker = marker
            os.register_at_fork(after_in_child=self._forget)
            return self

    def _forget(self) -> None:
        """In a forked child: close its copy of the descriptor, so the lock dies with the process that took it (and
        leave a marker to the parent)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self.marker = None

    @property
    def held(self) -> bool:
        return self.fd is not None or self.marker is not None

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.marker is not None:
            self.marker.unlink(missing_ok=True)
            self.marker = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *_: object) -> None:
        self.release()
