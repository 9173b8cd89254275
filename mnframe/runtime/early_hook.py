"""The excepthook ``import mnframe`` installs: abort an MPI job on an exception before any communicator.

Until ``create_communicator`` installs the full guard, an exception on one rank
of a library script (``import mnframe as chainermn``; ``MPI.COMM_WORLD`` used,
then a raise) prints a traceback and leaves the other ranks waiting forever.
This hook closes that gap and costs nothing at import: it only looks at
``sys.modules``. When an uncaught exception arrives and mpi4py's MPI is
initialised (not finalised) with more than one rank, it hands the exception to
the guard (banner, traceback, ``MPI_Abort``); otherwise it calls the hook that
was there before. ``MNFRAME_NO_GUARD=1`` leaves it inert. The guard's own
``install`` replaces it and chains to the hook this one replaced (``guard.previous_of``
skips a hook marked ``stands_in_for_guard``); this module imports the guard only when
it hands an exception over, and the guard does not import it.
"""

import os
import sys


def _mpi_job_running():
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None:
        return False
    try:
        return bool(mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1)
    except Exception:
        return False


def _no_guard():
    return os.environ.get("MNFRAME_NO_GUARD", "").strip().lower() in ("1", "true", "yes", "on")


def _hook(exc_type, exc, tb):
    if _mpi_job_running() and not _no_guard():
        from mnframe.runtime import guard

        guard.handle_uncaught(exc_type, exc, tb)
    _hook.previous(exc_type, exc, tb)


_hook.previous = sys.__excepthook__
_hook.stands_in_for_guard = True  # guard.previous_of chains past it to ``previous``


def install():
    """Install the hook once (idempotent)."""
    if sys.excepthook is not _hook:
        _hook.previous = sys.excepthook
        sys.excepthook = _hook
