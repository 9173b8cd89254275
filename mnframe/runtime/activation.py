"""What creating a communicator switches on, once per process.

``create_communicator`` calls ``on_communicator_created(comm)`` last. By default
this installs the abort guard (excepthooks), starts the collective watchdog on
the communicator's ranks and, with ``MNFRAME_DEBUG_COLLECTIVES=1``, the
collective matcher. ``MNFRAME_NO_GUARD=1`` opts out of all of it (set it for
every rank: the watchdog's start is collective).
"""
import os

from mnframe.runtime import guard, watchdog

ENV_NO_GUARD = "MNFRAME_NO_GUARD"
ENV_DEBUG = "MNFRAME_DEBUG_COLLECTIVES"

_done = {"activated": False}


def _env_flag(name):
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def guard_disabled():
    return _env_flag(ENV_NO_GUARD)


def on_communicator_created(comm):
    """Install guard + watchdog (+ debug matcher) the first time a communicator is made.

    Collective over ``comm.mpi_comm`` the first time (it duplicates it); a no-op
    afterwards and when ``MNFRAME_NO_GUARD=1``.
    """
    if _done["activated"] or guard_disabled():
        return
    _done["activated"] = True
    mpi_comm = getattr(comm, "mpi_comm", comm)
    guard.install()
    watchdog.start(mpi_comm)
    if _env_flag(ENV_DEBUG):
        from mnframe.runtime import debug
        debug.enable(mpi_comm)


def activated():
    return _done["activated"]
