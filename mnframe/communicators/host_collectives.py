"""The host-side collectives of mnframe's own links, extensions and checkpoints.

They exchange a few statistics, objects and verdicts (batch-norm moments,
persistents, observations, file lists, checkpoint manifests) over the
communicator's ``mpi_comm`` (or a raw mpi4py communicator), so they work with
every communicator kind. Objects move through the communicators' own object
transport (``communicators.object_ops``: pickled bytes as arrays, chunked,
a pickling failure raised on every rank); each call is recorded in the op log
under its caller's name, so the collective watchdog can enforce its deadline
and name the operation a stuck rank is in.
"""

import numpy

from mnframe.runtime import oplog
from mnframe.runtime.mpi_comm import mpi_comm_of

__all__ = [
    "allreduce_sum",
    "allgather_array",
    "allgather_obj",
    "bcast_obj",
    "send_obj",
    "recv_obj",
    "all_agree",
    "share_verdict",
]


def allreduce_sum(comm, array, name="allreduce"):
    """Element-wise sum over ranks of a host (NumPy) array; returns a new array."""
    mpi_comm = mpi_comm_of(comm)
    send = numpy.ascontiguousarray(array)
    recv = numpy.empty_like(send)
    with oplog.op(name, array=send):
        mpi_comm.Allreduce(send, recv)
    return recv


def allgather_array(comm, array, name="allgather"):
    """Stack every rank's host array (same shape and dtype on all ranks): shape ``(size,) + shape``."""
    mpi_comm = mpi_comm_of(comm)
    send = numpy.ascontiguousarray(array)
    recv = numpy.empty((mpi_comm.Get_size(),) + send.shape, dtype=send.dtype)
    with oplog.op(name, array=send):
        mpi_comm.Allgather(send, recv)
    return recv


def allgather_obj(comm, obj, name="allgather_obj"):
    """A list with every rank's picklable ``obj``, in rank order."""
    from mnframe.communicators import object_ops

    mpi_comm = mpi_comm_of(comm)
    with oplog.op(name):
        return object_ops.allgather_obj(mpi_comm, obj)


def bcast_obj(comm, obj, root=0, name="bcast_obj"):
    from mnframe.communicators import object_ops

    mpi_comm = mpi_comm_of(comm)
    with oplog.op(name, peer=root):
        return object_ops.bcast_obj(mpi_comm, obj, root=root)


def send_obj(comm, obj, dest, tag=0, name="send_obj"):
    from mnframe.communicators import object_ops

    mpi_comm = mpi_comm_of(comm)
    with oplog.op(name, peer=dest):
        object_ops.send_obj(mpi_comm, obj, dest, tag)


def recv_obj(comm, source, tag=0, name="recv_obj"):
    from mnframe.communicators import object_ops

    mpi_comm = mpi_comm_of(comm)
    with oplog.op(name, peer=source):
        return object_ops.recv_obj(mpi_comm, source, tag)


def all_agree(comm, ok, name="agree"):
    """True on every rank iff ``ok`` is true on every rank (one tiny allreduce)."""
    flag = numpy.array([0 if ok else 1], dtype=numpy.int32)
    return int(allreduce_sum(comm, flag, name=name)[0]) == 0


def share_verdict(comm, error, what, exc_type=RuntimeError, wording=None):
    """Share this rank's ``error`` (None: fine, or a message); every rank raises the same
    ``exc_type``, marked ``agreed``, if any rank has one (``communicators.verdict.raise_if_any``),
    so no rank goes on into a collective the others have abandoned. ``wording``: how the
    message reads (``verdict.each_rank``: one line per rank at fault; ``first``, ``distinct``, ...)."""
    from mnframe.communicators import verdict

    errors = allgather_obj(comm, error, name=f"verdict:{what}")
    verdict.raise_if_any(errors, what, exc_type, wording or verdict.each_rank)
