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
status (not killed by a signal: mpiexec names those itself; but see below for SIGKILL), writes
"mnframe: rank R (pid P on host H) exited with status N without running its
exit handlers ..." to the launcher's stderr (the stderr of the rank's parent,
the MPI process manager, opened when the sentinel starts). A rank killed by
SIGKILL is reported when the kernel's out-of-memory killer ran meanwhile (the
``oom_kill`` count of ``/proc/vmstat`` rose since the sentinel started; once per
job and node, naming the rank whose death its sentinel noticed first, since mpiexec
then SIGKILLs the other ranks too), and, where that
count cannot be read, as "often the kernel's out-of-memory killer". Linux only;
off with ``MNFRAME_NO_GUARD=1``.
"""

import inspect
import os
import select
import socket
import subprocess
import sys

# Where the kernel counts the processes its out-of-memory killer killed (Linux >= 4.13).
OOM_COUNTER = "/proc/vmstat"

# The sentinel's program: arguments rank, pid, host, launcher pid, OOM counter file and its count
# now. Kept import-light (-I -S).
_PROGRAM = r"""
import os, sys, time
rank, pid, host, launcher = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])


OOM_READER


try:  # opened now: the launcher may be gone by the time there is something to say
    out = open(f"/proc/{launcher}/fd/2", "w")
except OSError:
    sys.exit(0)
oom_before = None if sys.argv[6] == "-" else int(sys.argv[6])  # read by the rank as it started us
try:  # tell the rank we are listening (wait_ready): from now on "noticed" is the rank's time of death
    os.write(1, b"r")
    os.close(1)
except OSError:
    pass
try:
    explained = os.read(0, 1)
except OSError:
    explained = b""
if explained:
    sys.exit(0)
noticed = time.monotonic_ns()  # the pipe closed as the rank died: earlier for the first rank to die
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
oom_after = oom_kills(sys.argv[5])
killed = status is not None and status & 0x7F == 9  # SIGKILL: mpiexec names the signal, not why
if (oom_before is not None and oom_after is not None and oom_after > oom_before) or (killed and oom_before is None):
    # One report per job and node, naming the rank that died first: the ranks mpiexec kills next
    # see the same count, so each sentinel enters its notice time and only the earliest speaks.
    ballot = f"/tmp/mnframe-oom-{launcher}-{oom_after}"
    try:
        os.makedirs(ballot, mode=0o700, exist_ok=True)
        os.close(os.open(f"{ballot}/{noticed:020d}-{rank}", os.O_CREAT | os.O_WRONLY, 0o600))
        time.sleep(0.3)  # the others killed in the same cleanup enter theirs meanwhile
        if min(os.listdir(ballot)) != f"{noticed:020d}-{rank}":
            sys.exit(0)
    except OSError:
        sys.exit(0)
    if oom_before is None:
        why = "this is often the kernel's out-of-memory killer"
    else:
        why = (f"the kernel's out-of-memory killer ran meanwhile (oom_kill in /proc/vmstat rose by "
               f"{oom_after - oom_before}): a rank most likely ran out of memory")
    how = "was killed by signal 9 (SIGKILL)" if killed else "ended without running its exit handlers"
    try:
        out.write(f"\nmnframe: rank {rank} (pid {pid} on host {host}) {how}; {why}. `dmesg` or "
                  f"`journalctl -k` names the process it killed; lower the memory per rank "
                  f"(dataset.batch_size, the model's size) or run fewer ranks per node.\n")
        out.close()  # the launcher's stderr: whoever reads it to its end need not wait for us
    except OSError:
        pass
    time.sleep(3)
    for entry in os.listdir(ballot):
        try:
            os.unlink(f"{ballot}/{entry}")
        except OSError:
            pass
    try:
        os.rmdir(ballot)
    except OSError:
        pass
    sys.exit(0)
if status is None or status & 0x7F:
    sys.exit(0)  # gone before we looked, or killed by another signal (mpiexec reports those)
text = (f"\nmnframe: rank {rank} (pid {pid} on host {host}) exited with status {status >> 8} without running "
        f"its exit handlers (os._exit, MPI_Abort called outside mnframe, or an exit from native code); "
        f"mpiexec ends the job with that status.\n")
try:
    out.write(text)
    out.flush()
except OSError:
    pass
"""


def oom_kills(path):
    """The kernel's count of out-of-memory kills (``oom_kill`` in /proc/vmstat), or None."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


_state = {"fd": None, "proc": None}


def start(rank):
    """Start this rank's sentinel (once; Linux only). Returns False where it cannot run."""
    if _state["fd"] is not None:
        return True
    if not sys.platform.startswith("linux") or not os.path.exists(f"/proc/{os.getpid()}/stat"):
        return False
    oom_before = oom_kills(OOM_COUNTER)
    program = _PROGRAM.replace("OOM_READER", inspect.getsource(oom_kills))
    read_end, write_end = os.pipe()
    try:
        _state["proc"] = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                "-c",
                program,
                str(rank),
                str(os.getpid()),
                socket.gethostname(),
                str(os.getppid()),
                OOM_COUNTER,
                str(oom_before) if oom_before is not None else "-",
            ],
            stdin=read_end,
            stdout=subprocess.PIPE,
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


def wait_ready(timeout=2.0):
    """Wait (at most ``timeout`` s) until the sentinel listens, so that it notices this rank's death
    as it happens; the rank started it first and did other start-up work meanwhile."""
    proc = _state["proc"]
    if proc is None or proc.stdout is None:
        return
    try:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        if ready:
            proc.stdout.read(1)
    except (OSError, ValueError):
        pass
    finally:
        proc.stdout.close()


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
