"""Small host-side collectives used by links and extensions.

The links and trainer extensions exchange a few statistics (batch-norm moments,
persistents, observations, file lists). They talk to the communicator's
``mpi_comm`` directly, on host buffers, so they work with every communicator
kind; each call is recorded in the op log so the collective watchdog can
enforce its deadline and name the operation a stuck rank is in.
"""
import numpy

from mnframe.runtime import oplog

__all__ = ["mpi_comm_of", "allreduce_sum", "allgather_array", "allgather_obj", "bcast_obj",
           "send_obj", "recv_obj", "all_agree", "raise_if_any"]


def mpi_comm_of(comm):
    """The mpi4py communicator behind a mnframe communicator (or ``comm`` itself)."""
    mpi_comm = getattr(comm, "mpi_comm", None)
    if mpi_comm is not None:
        return mpi_comm
    if hasattr(comm, "Allreduce") and hasattr(comm, "Get_rank"):
        return comm  # already an mpi4py communicator
    raise TypeError(f"expected a mnframe communicator (with .mpi_comm) or an mpi4py Comm, "
                    f"got {type(comm).__name__}; create one with mnframe.create_communicator()")


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
    mpi_comm = mpi_comm_of(comm)
    with oplog.op(name):
        return mpi_comm.allgather(obj)


def bcast_obj(comm, obj, root=0, name="bcast_obj"):
    mpi_comm = mpi_comm_of(comm)
    with oplog.op(name, peer=root):
        return mpi_comm.bcast(obj, root=root)


def send_obj(comm, obj, dest, tag=0, name="send_obj"):
    mpi_comm = mpi_comm_of(comm)
    with oplog.op(name, peer=dest):
        mpi_comm.send(obj, dest=dest, tag=tag)


def recv_obj(comm, source, tag=0, name="recv_obj"):
    mpi_comm = mpi_comm_of(comm)
    with oplog.op(name, peer=source):
        return mpi_comm.recv(source=source, tag=tag)


def all_agree(comm, ok, name="agree"):
    """True on every rank iff ``ok`` is true on every rank (one tiny allreduce)."""
    flag = numpy.array([0 if ok else 1], dtype=numpy.int32)
    return int(allreduce_sum(comm, flag, name=name)[0]) == 0


def raise_if_any(comm, error, exc_type=RuntimeError, name="share_errors"):
    """Share per-rank error strings; every rank raises the same error if any rank has one.

    ``error`` is ``None`` (this rank is fine) or a message. Because the verdict
    is shared, no rank goes on into a collective the others have abandoned.
    """
    errors = allgather_obj(comm, error, name=name)
    bad = [(r, e) for r, e in enumerate(errors) if e is not None]
    if bad:
        raise exc_type("; ".join(f"rank {r}: {e}" for r, e in bad))
