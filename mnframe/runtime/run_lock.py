"""One job per run directory: rank 0 holds an exclusive lock on ``<run dir>/.mnframe.lock`` for the job's life.

Two jobs in one run directory would mix their checkpoints, logs and models without a
word. The lock is an ``flock(2)`` (as ``filelock`` takes it on Unix): the kernel releases it
when the holding process ends, however it ends (SIGKILL, the out-of-memory killer), so a
job that died never blocks the next one. Who holds it is written beside it
(``.mnframe.lock.json``: host, pid, start time) for the message a second job gets. A lock
still held while its recorded holder no longer runs on this host is held by a process the
holder forked (a data-loader worker still has the file open): the message says so. A
sweep's jobs (``-m``) must each have their own directory: a job whose directory an earlier
job of the same sweep used is refused too.

A lock that cannot be taken safely stops the job (issue 38): ``.mnframe.lock`` is opened
with ``O_NOFOLLOW|O_NONBLOCK`` and must be a regular file (a planted link, a FIFO, a
directory are refused), and a file system without ``flock`` is refused too, in one line,
status 2. The only way to run without the lock is the documented opt-out
``MNFRAME_UNSAFE_NO_LOCK=1`` (then two jobs in one directory are not prevented).
"""

import datetime
import errno
import json
import logging
import os
import socket
import stat
from typing import Dict, Optional

LOCK_NAME = ".mnframe.lock"
HOLDER_NAME = ".mnframe.lock.json"

log = logging.getLogger("mnframe.run_lock")
_held: Dict[str, object] = {}  # run dir -> the descriptor holding its flock (None: MNFRAME_UNSAFE_NO_LOCK)
_used = set()  # run dirs this process ran a job in (a sweep's earlier jobs)


def _key(run_dir) -> str:
    return os.path.realpath(os.fspath(run_dir))


def acquire(run_dir) -> Optional[str]:
    """Lock ``run_dir`` for this job (rank 0, before anything is written there).

    Returns None when this job may use the directory, else the one-line reason it may
    not (another job holds it, or an earlier job of this sweep used it); nothing in the
    directory is changed then."""
    key = _key(run_dir)
    if key in _held:
        return None
    if key in _used:
        return (
            f"hydra.sweep.dir: {run_dir} is the run directory of an earlier job of this sweep; "
            "keep ${hydra.job.num} in hydra.sweep.subdir so that every job has its own directory"
        )
    try:
        lock = _lock(os.path.join(run_dir, LOCK_NAME))
    except BlockingIOError:
        return busy_message(run_dir)
    except _Unsafe as exc:
        if not _opted_out():
            return (
                f"hydra.run.dir: cannot lock {run_dir} safely: {exc}; one job per run directory could not be "
                f"enforced, so the job does not start. Fix it and run again, or set MNFRAME_UNSAFE_NO_LOCK=1 "
                f"to run without the lock (two jobs could then damage each other's checkpoints)"
            )
        log.warning("MNFRAME_UNSAFE_NO_LOCK=1: running %s without its lock (%s)", run_dir, exc)
        lock = None
    _held[key] = lock
    _used.add(key)
    if lock is not None:
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "started": _now()}
        try:
            from mnframe.runtime.fs import atomic_write_text

            # a rename onto the name: a planted link there is replaced, never written through
            atomic_write_text(os.path.join(run_dir, HOLDER_NAME), json.dumps(holder) + "\n", fsync=False)
        except OSError:
            pass  # only the message of a second job is poorer
    return None


class _Unsafe(Exception):
    """The lock file cannot be taken safely (a link, not a regular file, no ``flock`` here)."""


def _lock(path):
    """An open descriptor holding ``flock(LOCK_EX)`` on ``path``; BlockingIOError when another
    process holds it, ``_Unsafe`` when it cannot be taken safely."""
    import fcntl

    flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):
            raise _Unsafe(f"{path} is a symbolic link to {os.readlink(path)} (remove it: rm {path})") from None
        raise _Unsafe(f"{path} cannot be opened ({exc})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _Unsafe(f"{path} is not a regular file (remove it)")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise BlockingIOError(exc.errno, str(exc)) from None
            raise _Unsafe(f"this file system cannot lock {path} ({exc})") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _opted_out() -> bool:
    from mnframe.runtime import settings

    return bool(settings.get("MNFRAME_UNSAFE_NO_LOCK"))


def new_command() -> None:
    """A new command line starts (``cli.train``): the jobs of an earlier one were another sweep."""
    _used.clear()


def owns(run_dir) -> bool:
    """Whether this process runs the job of ``run_dir`` (it may write there)."""
    return _key(run_dir) in _held


def release(run_dir) -> None:
    """End of the job: remove the holder record and unlock (the lock file stays, empty)."""
    lock = _held.pop(_key(run_dir), None)
    if lock is None:
        return
    try:
        os.unlink(os.path.join(run_dir, HOLDER_NAME))
    except OSError:
        pass
    os.close(lock)  # closing the last descriptor releases the flock


def busy_message(run_dir) -> str:
    """The line a second job gets: the directory and who holds it."""
    try:
        fd = os.open(os.path.join(run_dir, HOLDER_NAME), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd) as f:
            holder = json.loads(f.read(4096))
        who = f"host {holder['host']}, pid {holder['pid']}, started {holder['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        holder, who = None, "holder unknown"
    hint = "wait for it to end, or choose another directory (hydra.run.dir=...)"
    if holder and holder.get("host") == socket.gethostname() and not _alive(holder.get("pid")):
        hint = (
            f"pid {holder['pid']} no longer runs, so a process it started (a data-loader worker) "
            f"still holds {os.path.join(run_dir, LOCK_NAME)}: end it (fuser {LOCK_NAME}), then run again"
        )
    return f"hydra.run.dir: {run_dir} is in use by another mnframe job ({who}); {hint}"


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (OSError, TypeError, ValueError):
        return True  # exists but not ours, or unknown: do not claim it died
    return True


def _now() -> str:
    return datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
