"""A deadline on MPI's own start and end (``MPI_Init``, ``MPI_Finalize``), kept by a process outside MPI.

The collective deadline (runtime/watchdog.py) covers every operation from the first communicator
on, but not MPI's start (under ``srun``, ``MPI_Init`` is also Slurm's PMI exchange, where a job
can wait forever: docs/multi_node.md) nor what follows the exit barrier (``MPI_Finalize``).
mpi4py holds the GIL in both, so no Python thread of the rank can watch them: a tiny *watcher*
process (no MPI, ``python -I -S``) does. It is started just before ``MPI_Init`` (mpi_start's
loader, only in a process some launcher started among several) and reads one pipe:

* ``started()`` (``MPI_Init`` returned): the clock stops; the watcher waits, idle;
* ``ending()`` (every rank passed the exit barrier: MPI_Finalize and the exit follow): the clock
  runs again;
* the pipe's end (the rank exited, whichever way): the watcher exits silently.

If the clock runs past the deadline (``MNFRAME_MPI_START_TIMEOUT``, default 600 s; ``0`` turns
it off; a setting of its own, so that a short collective deadline does not cut a slow start
short), the watcher writes one line naming the phase, the task and its host, then SIGKILLs the
rank: every rank stuck there does the same, so the job ends under any launcher.
"""

import os
import sys

_PROGRAM = r"""
import os, select, signal, sys
pid, seconds, who = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
phases = {b"i": "MPI's start (MPI_Init; under srun also Slurm's PMI exchange)",
          b"e": "MPI's end (MPI_Finalize and the process's exit, after every rank passed the exit barrier)"}
why = {b"i": "a task never reached MPI_Init, or the launcher's PMI is stuck (under srun with the mpich "
             "wheel: check MPIR_CVAR_CH4_NETMOD, docs/multi_node.md)",
       b"e": "the MPI library is stuck finishing (docs/reliability.md)"}
phase = b"i"
while True:
    ready = select.select([0], [], [], seconds if phase else None)[0]
    if not ready:
        break
    got = os.read(0, 1)
    if not got:
        sys.exit(0)  # the rank has exited
    phase = None if got == b"s" else got
try:  # the rank's own stderr, opened only now: holding it open would delay the launcher's view of its end
    err = os.open(f"/proc/{pid}/fd/2", os.O_WRONLY | os.O_APPEND)
    os.write(err, (f"\nmnframe: {phases[phase]} has not finished after {seconds:g} s on {who} (pid {pid}): "
                   f"{why[phase]}; killing it (deadline: MNFRAME_MPI_START_TIMEOUT, 0 turns it off)\n").encode())
except OSError:
    pass
try:
    os.kill(pid, signal.SIGKILL)
except OSError:
    pass
"""

ENV_TIMEOUT = "MNFRAME_MPI_START_TIMEOUT"
_state = {"pipe": None, "proc": None}


def _deadline():
    from mnframe.runtime import settings

    try:
        return settings.parse(ENV_TIMEOUT)
    except Exception:  # a malformed value: the settings' validation says so once MPI runs
        return settings.BY_NAME[ENV_TIMEOUT].default_value


def wanted() -> bool:
    """A process that a launcher started among several, with a deadline and mnframe's guard on."""
    from mnframe.runtime import launcher_env, settings

    try:
        off = settings.parse("MNFRAME_NO_GUARD")
    except Exception:
        off = False
    launch = launcher_env.read()
    return not off and launch is not None and launch.size > 1 and bool(_deadline())


def _open_fds():
    """This process's open descriptors (a close of one that is shut by then is harmless to spawn)."""
    try:
        return sorted(int(name) for name in os.listdir("/proc/self/fd"))
    except OSError:
        return range(3, 1024)


def arm_start() -> None:
    """Just before ``MPI_Init``: start the watcher, its clock running (no-op where not wanted)."""
    if _state["pipe"] is not None or not wanted():
        return
    import socket  # here: `import mnframe` stays free of socket (tests/unit/test_rel_runtime.py)

    from mnframe.runtime import launcher_env

    who = f"task {launcher_env.launcher_rank()} on host {socket.gethostname()}"
    argv = [sys.executable, "-I", "-S", "-c", _PROGRAM, str(os.getpid()), f"{_deadline():g}", who]
    read, write = os.pipe()
    # posix_spawn, not subprocess.Popen: a Popen object still running at the rank's exit makes
    # Python warn "subprocess N is still running" on stderr (the watcher outlives the rank by design)
    actions = [
        (os.POSIX_SPAWN_DUP2, read, 0),
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
    ]
    # and no other descriptor of the rank (Popen's close_fds): a launcher's PMI socket held open by
    # the watcher hides the rank's exit from the launcher (tests/test_rel_holes.py)
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _open_fds() if fd > 2]
    try:
        # setsid: a Ctrl-C to the job's process group is for the ranks
        pid = os.posix_spawn(sys.executable, argv, os.environ, file_actions=actions, setsid=True)
    except OSError:  # no deadline rather than no job
        os.close(read)
        os.close(write)
        return
    os.close(read)
    os.set_inheritable(write, False)
    _state["pipe"], _state["proc"] = write, pid  # a bare fd: a file object left open at exit warns too


def _send(byte: bytes) -> None:
    pipe = _state["pipe"]
    if pipe is None:
        return
    try:
        os.write(pipe, byte)
    except OSError:
        _state["pipe"] = None


def started() -> None:
    """``MPI_Init`` returned: stop the clock."""
    _send(b"s")


def ending() -> None:
    """Every rank passed the exit barrier: the clock runs until this process has exited."""
    _send(b"e")
