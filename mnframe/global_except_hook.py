"""ChainerMN's ``global_except_hook``: abort all ranks on an uncaught exception.

``add_hook()`` installs mnframe's abort guard (mnframe.runtime.guard): an
uncaught exception, KeyboardInterrupt or crashed thread on any rank prints the
rank, host, pid and traceback and calls ``MPI.COMM_WORLD.Abort``. mnframe
already installs it when a communicator is created (unless
``MNFRAME_NO_GUARD=1``); calling it yourself is harmless. As in ChainerMN,
``_add_hook_if_enabled()`` installs it when ``CHAINERMN_FORCE_ABORT_ON_EXCEPTION``
(or ``MNFRAME_FORCE_ABORT_ON_EXCEPTION``) is set.
"""

import os

from mnframe.runtime import guard

_ENV_FLAGS = ("CHAINERMN_FORCE_ABORT_ON_EXCEPTION", "MNFRAME_FORCE_ABORT_ON_EXCEPTION")


def add_hook():
    """Install the global abort-on-exception hook (idempotent)."""
    guard.install()


def _add_hook_if_enabled():
    if any(os.environ.get(name) for name in _ENV_FLAGS):
        add_hook()
