"""What creating a communicator switches on, once per process.

``create_communicator`` calls ``on_communicator_created(comm)`` last. The first
time, it validates every ``MNFRAME_*`` setting (mnframe.runtime.settings: a bad
value is a ConfigError, status 2, on every rank), then by default installs the
abort guard (excepthooks), starts the collective watchdog on the communicator's
ranks and, with ``MNFRAME_DEBUG_COLLECTIVES=1``, the collective matcher.
``MNFRAME_NO_GUARD=1`` opts out of all but the validation (set it for every
rank: the watchdog's start is collective).
"""

import os
import sys

from mnframe.runtime import guard, settings, watchdog
from mnframe.runtime.mpi_comm import mpi_comm_of

ENV_NO_GUARD = "MNFRAME_NO_GUARD"
ENV_DEBUG = "MNFRAME_DEBUG_COLLECTIVES"

_done = {"validated": False, "activated": False}


def guard_disabled():
    return settings.get(ENV_NO_GUARD)


def _validate(mpi_comm):
    settings.validate()
    if mpi_comm.Get_rank() == 0:
        for name, close in settings.unknown():
            hint = f" (did you mean {close}?)" if close else ""
            sys.stderr.write(
                f"mnframe: warning: {name} is not an mnframe setting{hint}; it is ignored. "
                f"The settings are listed in docs/reliability.md.\n"
            )


def on_communicator_created(comm):
    """Validate the settings, then install guard + watchdog (+ debug matcher), the first time.

    Collective over ``comm.mpi_comm`` the first time (it duplicates it); a no-op
    afterwards and when ``MNFRAME_NO_GUARD=1``.
    """
    mpi_comm = mpi_comm_of(comm)
    if not _done["validated"]:
        # The guard first, so that a bad setting ends the job with status 2 (message
        # once, every rank) rather than a traceback per rank.
        if not settings.parse(ENV_NO_GUARD, _safe_env()):
            guard.install()
        _validate(mpi_comm)
        _done["validated"] = True
    if _done["activated"] or guard_disabled():
        return
    _done["activated"] = True
    guard.install()
    watchdog.start(mpi_comm)
    if settings.get(ENV_DEBUG):
        from mnframe.runtime import collective_check

        collective_check.enable(mpi_comm)


def _safe_env():
    """The environment with a malformed MNFRAME_NO_GUARD left out (validate reports it)."""
    env = dict(os.environ)
    try:
        settings.parse(ENV_NO_GUARD, env)
    except Exception:
        env.pop(ENV_NO_GUARD, None)
    return env


def activated():
    return _done["activated"]
