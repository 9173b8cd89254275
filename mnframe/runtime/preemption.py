"""Graceful preemption: SIGTERM/SIGUSR1 -> checkpoint at the next iteration boundary, exit 0.

The first Ctrl-C (SIGINT) is the same request, remembered as an interruption (the
runner then exits 130 after the checkpoint); a second Ctrl-C, at least
``SECOND_INTERRUPT_S`` later (one keypress can reach a rank twice: from the
terminal and forwarded by mpiexec), ends the process at once with 130.

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

import os
import signal
import sys
import threading
import time

import numpy

from mnframe.runtime import oplog
from mnframe.runtime.mpi_comm import mpi_comm_of

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

SECOND_INTERRUPT_S = 1.0  # a later SIGINT is a second Ctrl-C: exit at once
INTERRUPTED_STATUS = 130  # 128 + SIGINT (mnframe.runtime.errors.ExitStatus.INTERRUPTED)

_state = {"signal": None, "agreed": False, "installed": False, "interrupted": False, "sigint_at": None}
_flag = threading.Event()
_interrupt = threading.Event()  # this rank received SIGINT


def _world_rank():
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        return mpi.COMM_WORLD.Get_rank() if mpi is not None and mpi.Is_initialized() else 0
    except Exception:
        return 0


def _sigint_handler(_signum, _frame):
    now = time.monotonic()
    first = _state["sigint_at"]
    if first is not None and now - first >= SECOND_INTERRUPT_S:
        if _world_rank() == 0:
            sys.stderr.write("mnframe: second Ctrl-C: exiting now, without a checkpoint\n")
        sys.stderr.flush()
        sentinel = sys.modules.get("mnframe.runtime.sentinel")
        if sentinel is not None:
            sentinel.explained()
        os._exit(INTERRUPTED_STATUS)
    if first is None:
        _state["sigint_at"] = now
        _interrupt.set()
        _flag.set()
        if _world_rank() == 0:  # every rank gets the Ctrl-C: one of them says so
            sys.stderr.write(
                "mnframe: Ctrl-C: all ranks will checkpoint at the next iteration boundary and stop "
                "(press Ctrl-C again to exit at once, without a checkpoint)\n"
            )
            sys.stderr.flush()


def _handler(signum, _frame):
    _state["signal"] = signum
    _flag.set()
    sys.stderr.write(
        f"mnframe: received {signal.Signals(signum).name}; all ranks will checkpoint "
        f"at the next iteration boundary and exit 0\n"
    )
    sys.stderr.flush()


def install(signals=SIGNALS, interrupt=False):
    """Catch ``signals`` (main thread only; once), and SIGINT as above when ``interrupt``
    (the checkpoint extension asks for it). Returns False if not possible here."""
    if threading.current_thread() is not threading.main_thread():
        return _state["installed"]
    if interrupt and _state["sigint_at"] is None:
        signal.signal(signal.SIGINT, _sigint_handler)
    if _state["installed"]:
        return True
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


def agree(comm, extra=()):
    """True on every rank if any rank was asked to stop (collective: one tiny allreduce).

    ``extra``: more non-negative integers to reduce with MAX in the same allreduce
    (the checkpoint extension's non-finite-loss verdict); then ``(stop, maxima)`` is returned.
    """
    from mpi4py import MPI

    mpi_comm = mpi_comm_of(comm)
    local = numpy.array([1 if _flag.is_set() else 0, 1 if _interrupt.is_set() else 0, *extra], dtype=numpy.int64)
    total = local.copy()
    if mpi_comm.Get_size() > 1:  # called every iteration: skip the collective where it decides nothing
        with oplog.op("preemption.agree", array=local):
            mpi_comm.Allreduce(local, total, op=MPI.MAX)
    if total[0]:
        _state["agreed"] = True
    if total[1]:
        _state["interrupted"] = True
    if len(extra):
        return bool(total[0]), [int(v) for v in total[2:]]
    return bool(total[0])


def preempted():
    """True once the ranks agreed to stop for preemption (the run then exits 0)."""
    return _state["agreed"]


def interrupted():
    """True once the ranks agreed to stop and some rank's request was a Ctrl-C (the runner exits 130)."""
    return _state["agreed"] and _state["interrupted"]


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
