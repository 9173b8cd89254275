"""Name a rank that ends without running Python's exit handlers (``os._exit(n)``, a native crash).

MPICH's mpiexec ends the whole job with that rank's status and prints nothing
about which rank it was; the other ranks are killed at once, so they cannot
report it either. Each rank therefore starts a tiny *sentinel* process (its own
session, no MPI) holding the read end of a pipe. A rank that ends the way
mnframe knows about (end of script, ``sys.exit``, the guard's abort) first
writes one byte into the pipe: the sentinel exits silently. If the pipe closes
without that byte, the sentinel reads the dead rank's exit status from
``/proc/<pid>/stat`` (its exit code, set as the exit starts, readable until
the launcher reaps it) and, when the rank exited with a
status (not killed by a signal: mpiexec names those itself), writes
"mnframe: rank R (pid P on host H) exited with status N without running its
exit handlers ..." to the launcher's stderr (the stderr of the rank's parent,
the MPI process manager, opened when the sentinel starts). Linux only; off with
``MNFRAME_NO_GUARD=1``.
"""

import os
import socket
import subprocess
import sys

# The sentinel's program: arguments rank, pid, host, launcher pid. Kept import-light (-I -S).
_PROGRAM = r"""
import os, sys, time
rank, pid, host, launcher = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
try:  # opened now: the launcher may be gone by the time there is something to say
    out = open(f"/proc/{launcher}/fd/2", "w")
except OSError:
    sys.exit(0)
try:
    explained = os.read(0, 1)
except OSError:
    explained = b""
if explained:
    sys.exit(0)
status = None
end = time.monotonic() + 0.5
while time.monotonic() < end:  # the kernel sets exit_code first thing in exit: readable until reaped
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        break
    if len(fields) > 49 and (int(fields[49]) or fields[0] in "ZX"):
        status = int(fields[49])
        break
if status is None or status & 0x7F:
    sys.exit(0)  # gone before we looked, or killed by a signal (mpiexec reports those)
text = (f"\nmnframe: rank {rank} (pid {pid} on host {host}) exited with status {status >> 8} without running "
        f"its exit handlers (os._exit, MPI_Abort called outside mnframe, or an exit from native code); "
        f"mpiexec ends the job with that status.\n")
try:
    out.write(text)
    out.flush()
except OSError:
    pass
"""

_state = {"fd": None, "proc": None}


def start(rank):
    """Start this rank's sentinel (once; Linux only). Returns False where it cannot run."""
    if _state["fd"] is not None:
        return True
    if not sys.platform.startswith("linux") or not os.path.exists(f"/proc/{os.getpid()}/stat"):
        return False
    read_end, write_end = os.pipe()
    try:
        _state["proc"] = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                "-c",
                _PROGRAM,
                str(rank),
                str(os.getpid()),
                socket.gethostname(),
                str(os.getppid()),
            ],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
        )  # not in the rank's process group: the launcher's kill misses it
    except OSError:
        os.close(write_end)
        return False
    finally:
        os.close(read_end)
    _state["fd"] = write_end
    return True


def explained():
    """This rank's end is accounted for (exit handlers ran, or mnframe reported why): the sentinel stays quiet."""
    fd, _state["fd"] = _state["fd"], None
    if fd is None:
        return
    try:
        os.write(fd, b"x")
        os.close(fd)
    except OSError:
        pass
