"""The one exception type for problems a user causes and can fix.

`compclip.cli.main` prints a `CompclipError` as one `error:` line and exits 2 (a preempted run: a `preempted:` line,
exit 75; a distributed run that lost a rank: exit 75); every other exception is a bug and keeps its traceback. Each
subclass also derives from the built-in exception a Python caller would expect (`ValueError`, `FileNotFoundError`, ...),
so library code can catch either.
"""
from __future__ import annotations


class CompclipError(Exception):
    """A problem with the user's input, worded to name the file, record or option and what to do."""

    exit_code = 2  # what `compclip` exits with, after one line: "{label}: message"
    label = "error"

    def __str__(self) -> str:  # KeyError would otherwise print the message in quotes
        text = str(self.args[0]) if self.args else ""
        if text.startswith("Caught ") and "\nOriginal Traceback" in text:  # raised in a DataLoader worker, re-raised by torch
            last = text.rstrip().splitlines()[-1]
            return last.split(": ", 1)[1] if last.startswith(f"{type(self).__module__}.{type(self).__name__}: ") else last
        return text


class UsageError(CompclipError, ValueError):
    """An option or name that is not valid: an unknown model, method, benchmark, field or value."""


class DataError(CompclipError, ValueError):
    """A file or record that is there but cannot be used: malformed, empty, or lacking a field."""


class MissingFileError(CompclipError, FileNotFoundError):
    """A file or folder the user pointed at, or that a step needs, is not there."""


class MissingConceptError(CompclipError, KeyError):
    """A caption that the concept store has no record for."""


class DownloadError(CompclipError, OSError):
    """A download that failed or broke off; running again resumes it."""


class StorageError(CompclipError, OSError):
    """A write the file system refused (full disk, quota, read-only, permission): named with what was kept."""


class NonFiniteError(CompclipError, FloatingPointError):
    """A loss, gradient, weight or score that is NaN or infinite: training stops, a checkpoint or score is refused."""


class Stopped(BaseException):
    """A command other than `train` stopped by SIGTERM or SIGUSR1 (a cluster's stop). A BaseException, as KeyboardInterrupt:
    no handler of bad records takes it for one. `compclip.cli.main` prints one `stopped:` line and exits 128 + the
    signal's number, as a shell reports a process the signal ended; `finally` blocks have removed half-written files."""

    label = "stopped"

    def __init__(self, signum: int):
        import signal

        super().__init__(f"{signal.Signals(signum).name}: the files it finished are kept, and no half-written file is left; "
                         "run the same command again to finish")
        self.exit_code = 128 + signum


class Preempted(CompclipError):
    """A run stopped by the cluster (SIGTERM, SIGUSR1) after writing a checkpoint: the same command resumes it. Exits 75,
    sysexits' EX_TEMPFAIL ("try again"), so a job script can requeue on it."""

    exit_code = 75
    label = "preempted"


class PeerLost(CompclipError):
    """A distributed run whose collective failed: another rank died (its node lost) or hung past --dist-timeout. Exits 75,
    as a preempted run: the job can be requeued and resumes from its last checkpoint."""

    exit_code = 75


def absent_from_hub(subject: str, what: str, error: Exception, command: str | None = None, listed: str = "") -> CompclipError:
    """The one line for a file the Hugging Face Hub serves that could not be had (an open_clip tag's weights, an `hf-hub:`
    repository's, a fill model's): what is missing, the cache looked in, and the `command` that loads a copy instead,
    where one does; online, the download's own reason. `listed`: where the user is told more (offline only)."""
    from huggingface_hub import constants

    instead = f"or load a copy you have: {command}" if command else "or fetch it on a machine that can and copy it here"
    if constants.HF_HUB_OFFLINE:
        return MissingFileError(f"{subject}: {what} is not in the Hugging Face cache {constants.HF_HUB_CACHE}, and HF_HUB_OFFLINE "
                                f"forbids downloading it: run once online, set HF_HUB_CACHE to a cache that holds it{listed}, {instead}")
    said = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return DownloadError(f"{subject}: {what} could not be downloaded ({said}); running again resumes it, {instead}")
