"""One job per run directory: rank 0 holds an exclusive lock on ``<run dir>/.mnframe.lock`` for the job's life.

Two jobs in one run directory would mix their checkpoints, logs and models without a
word. The lock is ``filelock.FileLock``, an ``flock(2)`` on Unix: the kernel releases it
when the holding process ends, however it ends (SIGKILL, the out-of-memory killer), so a
job that died never blocks the next one. Who holds it is written beside it
(``.mnframe.lock.json``: host, pid, start time) for the message a second job gets. A lock
still held while its recorded holder no longer runs on this host is held by a process the
holder forked (a data-loader worker still has the file open): the message says so. A
sweep's jobs (``-m``) must each have their own directory: a job whose directory an earlier
job of the same sweep used is refused too.
"""

import datetime
import json
import logging
import os
import socket
from typing import Dict, Optional

LOCK_NAME = ".mnframe.lock"
HOLDER_NAME = ".mnframe.lock.json"

log = logging.getLogger("mnframe.run_lock")
_held: Dict[str, object] = {}  # run dir -> its FileLock (None: not lockable here, used unlocked)
_used = set()  # run dirs this process ran a job in (a sweep's earlier jobs)


def _key(run_dir) -> str:
    return os.path.realpath(os.fspath(run_dir))


def acquire(run_dir) -> Optional[str]:
    """Lock ``run_dir`` for this job (rank 0, before anything is written there).

    Returns None when this job may use the directory, else the one-line reason it may
    not (another job holds it, or an earlier job of this sweep used it); nothing in the
    directory is changed then."""
    import filelock

    key = _key(run_dir)
    if key in _held:
        return None
    if key in _used:
        return (
            f"hydra.sweep.dir: {run_dir} is the run directory of an earlier job of this sweep; "
            "keep ${hydra.job.num} in hydra.sweep.subdir so that every job has its own directory"
        )
    lock = filelock.FileLock(os.path.join(run_dir, LOCK_NAME), is_singleton=False)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        return busy_message(run_dir)
    except OSError as exc:  # a filesystem without locks: go on, unprotected
        log.warning("cannot lock %s (%s): one job per run directory is not enforced there", run_dir, exc)
        lock = None
    _held[key] = lock
    _used.add(key)
    if lock is not None:
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "started": _now()}
        try:
            with open(os.path.join(run_dir, HOLDER_NAME), "w") as f:
                f.write(json.dumps(holder) + "\n")
        except OSError:
            pass  # only the message of a second job is poorer
    return None


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
    lock.release()


def busy_message(run_dir) -> str:
    """The line a second job gets: the directory and who holds it."""
    try:
        with open(os.path.join(run_dir, HOLDER_NAME)) as f:
            holder = json.load(f)
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
