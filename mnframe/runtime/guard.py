"""The abort guard: one rank's failure ends the whole MPI job, quickly and loudly.

By default an MPI job whose rank raises hangs: the other ranks wait forever in
their next collective (the hang ChainerMN's FAQ warns about). The guard installs ``sys.excepthook`` and
``threading.excepthook`` so that an uncaught exception, ``KeyboardInterrupt`` or
a crashed background thread prints the rank, host, pid and full traceback and
then calls ``MPI.COMM_WORLD.Abort(status)``; MPICH's mpiexec then kills every
rank within a second. ``run_main`` is the same guard for the CLI, with the
exit-status mapping of ``ExitStatus``. A ``sys.exit(n)`` in a library user's
script is covered by the watchdog's exit announcement (see watchdog.py).
"""

import os
import socket
import sys
import threading
import time
import traceback

from mnframe.runtime.errors import ConfigError, DependencyError, EveryRankError, ExitStatus, say

_installed = False
_aborting = threading.Lock()
# How long ranks wait for each other to agree that a ConfigError was raised
# everywhere before falling back to Abort (one raised after a shared verdict waits
# longer: agree_timeout).
CONFIG_AGREE_TIMEOUT_S = 5.0
AGREED_TIMEOUT_S = 600.0  # the collective deadline's default, when it cannot be read
ABORT_FORWARD_S = 0.3  # pause between printing the reason and MPI_Abort (see abort)


def _mpi():
    """mpi4py.MPI if MPI is initialised (and not finalised), else None."""
    mod = sys.modules.get("mpi4py.MPI")
    if mod is None:
        return None
    try:
        if mod.Is_initialized() and not mod.Is_finalized():
            return mod
    except Exception:  # pragma: no cover - a broken MPI must not hide the real error
        return None
    return None


def where():
    """'rank R/N on host H (pid P)': who is speaking, for every failure message."""
    mpi = _mpi()
    rank, size = (mpi.COMM_WORLD.Get_rank(), mpi.COMM_WORLD.Get_size()) if mpi else (0, 1)
    return f"rank {rank}/{size} on host {socket.gethostname()} (pid {os.getpid()})"


def abort(status, message=None):
    """Print ``message`` and end the whole job with ``status``; never returns.

    Only the first caller in this process proceeds (a second failure while
    aborting, e.g. in another thread, waits for the first to finish).
    """
    status = int(status) if status else int(ExitStatus.ERROR)
    if not _aborting.acquire(blocking=True, timeout=10):
        os._exit(status)
    if message:
        say(message.removesuffix("\n"))
    _flush_all()  # os._exit and MPI_Abort skip Python's buffered output
    _sentinel_explained()
    mpi = _mpi()
    if mpi is not None and mpi.COMM_WORLD.Get_size() > 1:
        # The launcher forwards our stderr through a pipe; MPI_Abort makes it kill
        # every process, and output still in that pipe can be lost (seen with
        # MPICH's hydra under load). Give it a moment to forward the message.
        time.sleep(ABORT_FORWARD_S)
        try:
            mpi.COMM_WORLD.Abort(status)
        except Exception:
            say("mnframe: MPI_Abort failed; exiting this process only")
    os._exit(status)


def failure_message(kind, exc_type, exc, tb, status):
    """The banner + traceback printed before aborting."""
    lines = "".join(traceback.format_exception(exc_type, exc, tb))
    return (
        f"\n{'*' * 72}\nmnframe: {kind} on {where()}; aborting the MPI job "
        f"(exit status {int(status)}).\n{lines}{'*' * 72}\n"
    )


def status_for(exc):
    """Exit status for an exception (the ExitStatus table)."""
    if isinstance(exc, KeyboardInterrupt):
        return ExitStatus.INTERRUPTED
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return ExitStatus.OK
        return code if isinstance(code, int) else ExitStatus.ERROR
    return getattr(exc, "exit_status", ExitStatus.ERROR)


def agree_timeout(exc):
    """Seconds the ranks wait for each other to report ``exc`` (0: forever).

    An error raised after the ranks shared their verdict (``exc.agreed``: every rank
    raises it) waits as long as any collective (``MNFRAME_COLLECTIVE_TIMEOUT``): under
    load (8 ranks on 2 cores) a rank can arrive seconds after the others, and giving up
    would abort a job that was about to exit 2 cleanly. Any other waits
    ``CONFIG_AGREE_TIMEOUT_S``, since it may have been raised on this rank only.
    """
    if not getattr(exc, "agreed", False):
        return CONFIG_AGREE_TIMEOUT_S
    try:
        from mnframe.runtime.deadline import get_deadline

        return get_deadline()
    except Exception:  # a malformed setting must not hide this error
        return AGREED_TIMEOUT_S


def config_error_exit(exc):
    """End the job after a ConfigError: its message once (rank 0), no traceback, status 2.
    (A DependencyError ends the same way, as an "environment problem" with status 3.)

    A ConfigError is meant to be raised on every rank with the same message. The
    ranks agree on that with a time-limited non-blocking barrier (``agree_timeout``);
    if some rank never gets there (it raised on this rank only) we abort instead of
    hanging. Any error marked ``agreed`` (raised on every rank after a shared verdict,
    e.g. a failed checkpoint save) ends the same way with its own status and ``label``.
    """
    status, label = int(exc.exit_status), getattr(exc, "label", "configuration error")
    line = f"mnframe: {label}: {exc}" if label else f"mnframe: {exc}"
    mpi = _mpi()
    if mpi is None or mpi.COMM_WORLD.Get_size() == 1:
        say(line)
        _flush_all()
        os._exit(status)
    _meet_the_others(
        mpi, agree_timeout(exc), status, f"mnframe: {label} on {where()} (the other ranks did not report it):\n{exc}"
    )
    if mpi.COMM_WORLD.Get_rank() == 0:
        say(line)
    _flush_all()
    _sentinel_explained()
    _finalize_and_exit(mpi, status)


def _meet_the_others(mpi, timeout, status, abort_message=None):
    """Wait (a non-blocking barrier) until every rank ends the same way; abort with ``status``
    when some rank does not get here within ``timeout`` s (None: no limit)."""
    req = mpi.COMM_WORLD.Ibarrier()
    deadline = time.monotonic() + (timeout or float("inf"))
    while not req.Test():
        if time.monotonic() > deadline:
            abort(status, abort_message)
        time.sleep(0.01)


def _finalize_and_exit(mpi, status):
    """Every rank got here: a clean finalize is possible, so no abort noise."""
    _stop_watchdog()
    from mnframe.runtime import mpi_phase_watch

    mpi_phase_watch.ending()
    try:
        mpi.Finalize()
    except Exception:
        pass
    _exit_after_finalize(status)


def _exit_after_finalize(status):
    """End this process with ``status`` at once, as ``os._exit`` does (no Python exit handlers,
    no waiting for threads), but with C's exit handlers run.

    MPICH tells its process manager that a rank finalized from a C ``atexit`` handler, not in
    ``MPI_Finalize``. A rank that skips it (``os._exit``) looks crashed to mpiexec, which then
    SIGKILLs every rank still running: under load one is often still in ``MPI_Finalize``, and
    the job ends with status 9 and MPICH's "BAD TERMINATION" banner instead of ``status``.
    """
    _flush_all()
    try:
        import ctypes

        # libc's exit(); PyDLL keeps the GIL held, so no other Python thread runs meanwhile
        ctypes.PyDLL(None).exit(int(status))
    except Exception:  # pragma: no cover - no libc symbol table: the old way
        pass
    os._exit(status)


def _flush_all():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _sentinel_explained():
    """Tell this rank's sentinel (runtime/sentinel.py) that mnframe reported why it ends."""
    mod = sys.modules.get("mnframe.runtime.sentinel")
    if mod is not None:
        mod.explained()


def _stop_watchdog():
    wd = sys.modules.get("mnframe.runtime.watchdog")
    if wd is not None:
        wd.stop()


def out_of_memory_exit(exc, tb):
    """A MemoryError: one line on this rank (what was being allocated, its size, the keys
    that shrink it: mnframe.runtime.oom), no traceback, status 1. The ranks that ran out
    (usually all: the same model on every rank) leave together; if some rank did not
    reach this within CONFIG_AGREE_TIMEOUT_S (it waits in a collective), the job is aborted."""
    try:
        from mnframe.runtime import oom

        line = oom.describe(exc, tb, where())
    except Exception:  # the line must not fail
        line = f"mnframe: out of memory on {where()}: {exc}"
    say(line)
    _flush_all()
    _sentinel_explained()
    status = int(ExitStatus.ERROR)
    mpi = _mpi()
    if mpi is None or mpi.COMM_WORLD.Get_size() == 1:
        os._exit(status)
    _meet_the_others(mpi, CONFIG_AGREE_TIMEOUT_S, status)  # the line is out: no message if they are stuck
    _finalize_and_exit(mpi, status)


def handle_uncaught(exc_type, exc, tb, kind="uncaught exception"):
    """What the excepthooks and run_main do with an exception that ends a rank."""
    if isinstance(exc, (ConfigError, DependencyError, EveryRankError)):
        config_error_exit(exc)
    if isinstance(exc, MemoryError):
        out_of_memory_exit(exc, tb)
    status = status_for(exc)
    if isinstance(exc, KeyboardInterrupt):
        kind = "KeyboardInterrupt"
    elif isinstance(exc, SystemExit):
        kind = f"SystemExit({exc.code!r})"
    abort(status, failure_message(kind, exc_type, exc, tb, status))


def _excepthook(exc_type, exc, tb):
    prev = _previous["sys"]
    if prev not in (None, sys.__excepthook__, _excepthook):
        try:  # the user's own hook (logging, ...) still runs first
            prev(exc_type, exc, tb)
        except Exception:
            pass
    handle_uncaught(exc_type, exc, tb)


def _thread_excepthook(args):
    if args.exc_type is SystemExit:  # threading ignores SystemExit in threads; so do we
        return
    name = args.thread.name if args.thread is not None else "?"
    handle_uncaught(args.exc_type, args.exc_value, args.exc_traceback, kind=f"uncaught exception in thread {name!r}")


_previous = {"sys": None, "threading": None}


def previous_of(hook):
    """The hook to chain to when replacing ``hook``: a stand-in for the guard (``early_hook``'s,
    marked ``stands_in_for_guard``) is skipped for the hook it replaced, so nothing is handled twice."""
    return hook.previous if getattr(hook, "stands_in_for_guard", False) else hook


def install():
    """Install the abort-on-failure hooks once per process (idempotent)."""
    global _installed
    if _installed:
        return
    _previous["sys"] = previous_of(sys.excepthook)
    _previous["threading"] = threading.excepthook
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook
    _installed = True


def installed():
    return _installed


def run_main(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` under the guard; return 0 on success.

    Any failure ends the whole job with the status of ``ExitStatus``: 1 for an
    uncaught exception, 2 for ConfigError (message only), 124 for a collective
    timeout, 130 for KeyboardInterrupt, ``n`` for ``sys.exit(n)``. A
    ``sys.exit(0)``/``sys.exit()`` inside ``fn`` counts as success.
    """
    install()
    try:
        fn(*args, **kwargs)
    except SystemExit as exc:
        if status_for(exc) == 0:
            return 0
        if isinstance(exc.code, str):
            abort(ExitStatus.ERROR, f"mnframe: {where()} exited: {exc.code}")
        handle_uncaught(type(exc), exc, exc.__traceback__)
    except BaseException as exc:  # noqa: B902 - everything ends the job, that is the point
        handle_uncaught(type(exc), exc, exc.__traceback__)
    return 0


def exit_quietly(status: int) -> None:
    """``sys.exit(status)``; after a success (0) a Ctrl-C is ignored from now on (``python -m mnframe``).

    All that is left is exiting, and it can take a second: the exit deadline waits for the
    other ranks, then Python's finalization restores SIGINT's default action (only a
    Python-level handler is reset, ``SIG_IGN`` stays) before mpi4py's ``MPI_Finalize``, which
    waits for every rank. A Ctrl-C there killed a rank by signal and turned a finished job
    into MPICH's "BAD TERMINATION" banner and status 2 (issue 38)."""
    import signal

    if status == 0 and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(status)
