"""Graceful preemption: SIGTERM/SIGUSR1 -> checkpoint at the next iteration boundary, exit 0.

The signal handler only sets a flag (it may run on one rank only, e.g. a
scheduler killing one node). ``agree(comm)`` is called once per iteration by the
checkpoint extension: a one-integer MAX-allreduce, so every rank learns of the
request in the same iteration and they checkpoint and stop together. MPICH's
mpiexec forwards SIGTERM and SIGUSR1 to every rank (checked with hydra), so
signalling mpiexec works as well as signalling one rank.
"""
import signal
import sys
import threading

import numpy

from mnframe.runtime import oplog

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

_state = {"signal": None, "agreed": False, "installed": False}
_flag = threading.Event()


def _handler(signum, frame):
    _state["signal"] = signum
    _flag.set()
    sys.stderr.write(f"mnframe: received {signal.Signals(signum).name}; all ranks will checkpoint "
                     f"at the next iteration boundary and exit 0\n")
    sys.stderr.flush()


def install(signals=SIGNALS):
    """Catch ``signals`` (main thread only; once). Returns False if not possible here."""
    if _state["installed"]:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    for sig in signals:
        signal.signal(sig, _handler)
    _state["installed"] = True
    return True


def request():
    """Ask for preemption from code (same effect as the signal)."""
    _flag.set()


def requested():
    """True if this rank received a preemption signal."""
    return _flag.is_set()


def agree(comm):
    """True on every rank if any rank was asked to stop (collective: one tiny allreduce)."""
    from mpi4py import MPI
    mpi_comm = getattr(comm, "mpi_comm", comm)
    if mpi_comm.Get_size() == 1:  # called every iteration: skip the collective where it decides nothing
        if _flag.is_set():
            _state["agreed"] = True
        return _flag.is_set()
    local = numpy.array([1 if _flag.is_set() else 0], dtype=numpy.int32)
    total = numpy.zeros_like(local)
    with oplog.op("preemption.agree", array=local):
        mpi_comm.Allreduce(local, total, op=MPI.MAX)
    if total[0]:
        _state["agreed"] = True
    return bool(total[0])


def preempted():
    """True once the ranks agreed to stop for preemption (the run then exits 0)."""
    return _state["agreed"]
