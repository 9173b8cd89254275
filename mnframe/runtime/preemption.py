"""Graceful preemption: SIGTERM/SIGUSR1 -> checkpoint at the next iteration boundary, exit 0.

The signal handler only sets a flag (it may run on one rank only, e.g. a
scheduler killing one node). ``agree(comm)`` is called once per iteration by the
checkpoint extension: a one-integer MAX-allreduce, so every rank learns of the
request in the same iteration and they checkpoint and stop together. MPICH's
mpiexec forwards SIGTERM and SIGUSR1 to every rank (checked with hydra), so
signalling mpiexec works as well as signalling one rank.

``watch(trainer, extension, comm)`` gives any checkpoint-writing extension the
same behaviour (ChainerMN's ``create_multi_node_checkpointer`` and
``multi_node_snapshot`` use it): its trigger also fires once the ranks agreed
to stop, and the trainer then stops after that iteration, so the script goes on
after ``trainer.run()`` and ends with status 0.
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
    sys.stderr.write(
        f"mnframe: received {signal.Signals(signum).name}; all ranks will checkpoint "
        f"at the next iteration boundary and exit 0\n"
    )
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


class PreemptionTrigger:
    """An extension's trigger that also fires when the ranks agree to stop (one allreduce per call)."""

    def __init__(self, inner, comm):
        self.inner = inner
        self.comm = comm

    def __call__(self, trainer):
        fire = self.inner(trainer)  # always evaluated: interval triggers keep state
        return agree(self.comm) or fire

    def serialize(self, serializer):
        if hasattr(self.inner, "serialize"):
            self.inner.serialize(serializer)

    def __getattr__(self, name):  # finished, period, unit, ... of the inner trigger
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class StopAfterPreemption(PreemptionTrigger):
    """The trainer's stop trigger, plus 'stop once the ranks agreed to preempt' (no collective)."""

    def __init__(self, inner):
        super().__init__(inner, None)

    def __call__(self, trainer):
        return preempted() or self.inner(trainer)


def watch(trainer, extension, comm):
    """Make ``extension`` (already added to ``trainer``) write its checkpoint on preemption.

    Call it from the extension's ``initialize`` (main thread, every rank). Its
    trigger then fires also when a SIGTERM/SIGUSR1 reached any rank, and the
    trainer stops after that iteration. Returns False (nothing changed) when the
    signals cannot be caught here or the extension is not on the trainer.
    """
    entry = next((e for e in getattr(trainer, "_extensions", {}).values() if e.extension is extension), None)
    if entry is None or not install():
        return False
    if not isinstance(entry.trigger, PreemptionTrigger):
        entry.trigger = PreemptionTrigger(entry.trigger, comm)
    if not isinstance(trainer.stop_trigger, PreemptionTrigger):
        trainer.stop_trigger = StopAfterPreemption(trainer.stop_trigger)
    return True
