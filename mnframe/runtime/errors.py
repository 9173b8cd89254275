"""The errors mnframe raises for process-level failures, and the job exit statuses.

``ExitStatus`` is the one table of statuses a job can end with (documented in
docs/reliability.md); the guard maps each error class below onto it.
"""

import enum
import sys


def say(line: str, stream=None) -> None:
    """Write ``line`` and its newline in one write (stderr unless ``stream``), then flush.

    ``print`` writes the newline separately, and under ``PYTHONUNBUFFERED=1`` (which job scripts
    and launchers often set) each is a write of its own: the launcher then forwards two ranks'
    lines as ``line1line2`` and two blank lines. One write of a short line is never split."""
    stream = sys.stderr if stream is None else stream
    try:
        stream.write(line + "\n")
        stream.flush()
    except Exception:  # a closed stream: nothing more to say
        pass


class ExitStatus(enum.IntEnum):
    """How a guarded mnframe job ends (the status ``mpiexec`` returns)."""

    OK = 0  # training finished, or preempted after a clean checkpoint
    ERROR = 1  # an uncaught exception on some rank
    CONFIG = 2  # a configuration error (same message on every rank, no traceback)
    ENVIRONMENT = 3  # a dependency does not import: which, why, what to install (no traceback)
    DIVERGED = 4  # a non-finite loss stopped training (trainer.on_nonfinite: stop); no model written
    COLLECTIVE_TIMEOUT = 124  # an operation passed its deadline (like coreutils `timeout`)
    INTERRUPTED = 130  # Ctrl-C / KeyboardInterrupt (128 + SIGINT, the shell convention)


class MnframeRuntimeError(RuntimeError):
    """Base class of mnframe's process-level errors.

    ``agreed``: True on an error raised on every rank with the same message after the
    ranks shared their verdict; set only by ``agreed()`` below."""

    exit_status = ExitStatus.ERROR
    agreed = False


def agreed(exc):
    """Mark ``exc`` as raised on every rank, with the same message, after the ranks shared
    their verdict (``communicators.host_collectives.share_verdict``, or an every-rank end such as
    ``EveryRankError``): the guard then waits for the others as long as a collective
    would (``guard.agree_timeout``) before it gives up on them. Returns ``exc``."""
    exc.agreed = True
    return exc


class ConfigError(MnframeRuntimeError, ValueError):
    """A configuration is invalid; the message says what is wrong and how to fix it.

    Raise it on every rank with the same message (check collectively first);
    the guard prints the message once, without a traceback, and exits 2.
    """

    exit_status = ExitStatus.CONFIG


class DependencyError(MnframeRuntimeError):
    """A package mnframe or the configured code needs cannot be imported: an
    environment problem, not a configuration one. The message names the
    package, why it fails and what to install (``mnframe.dependencies``); it is
    printed without a traceback and the job exits 3.
    """

    exit_status = ExitStatus.ENVIRONMENT
    label = "environment problem"


class CollectiveTimeout(MnframeRuntimeError, TimeoutError):
    """A communication operation did not finish within its deadline."""

    exit_status = ExitStatus.COLLECTIVE_TIMEOUT


class CheckpointError(MnframeRuntimeError):
    """A checkpoint cannot be written, verified or loaded (message names file and rank)."""


class CollectiveMismatch(MnframeRuntimeError):
    """Debug mode: ranks issued different operations (or shapes) at the same point."""


class EveryRankError(MnframeRuntimeError):
    """A clean end that every rank reached together, with the same message: printed once
    (rank 0) as ``mnframe: <label>: <message>``, no traceback; the ranks exit with
    ``exit_status`` (the guard treats it like a ConfigError). Raised only after a shared
    verdict, so every instance is ``agreed``: the guard waits for the others as long as a
    collective would."""

    label = None

    def __init__(self, *args):
        super().__init__(*args)
        agreed(self)


class SaveError(CheckpointError, EveryRankError):
    """A checkpoint or the trained model could not be written (a full disk, any OSError).

    Raised on every rank after the ranks shared their verdicts (agreed): the guard
    prints the message once, without a traceback, and every rank exits 1 together. The
    message names the path, the bytes needed and the error; the previous checkpoint is kept.
    """

    label = "save failed"


class ResumeFailed(CheckpointError, EveryRankError):
    """A chosen checkpoint could not be loaded, or its replicas disagree (mnframe.checkpoint.reshard).

    Raised on every rank after the ranks shared their verdicts: printed once, without a
    traceback, and every rank exits 1 together; the checkpoint is left as it is."""

    label = "resume failed"


class TrainingDiverged(EveryRankError):
    """A non-finite loss (or weights) stopped training (``trainer.on_nonfinite: stop``)."""

    exit_status = ExitStatus.DIVERGED
    label = "training diverged"


class Interrupted(EveryRankError):
    """Ctrl-C: the ranks checkpointed at an iteration boundary and stopped."""

    exit_status = ExitStatus.INTERRUPTED
