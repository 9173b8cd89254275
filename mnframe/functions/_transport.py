"""How the differentiable communication functions move arrays.

The communicator's array methods carry each array's shape and dtype with it
(any dtype, different shapes per rank) and report argument errors on every
rank at once, so this module only adapts them to the functions' needs:
tuples in and out, results on the caller's device, and, in the backward pass,
a check that every gradient has the shape its variable had in the forward
pass. That check turns a send/recv pairing mismatch into a clear error instead
of silently wrong gradients.

All traffic goes through the communicator (``comm.send``, ``comm.recv``,
``comm.bcast``, ``comm.gather``, ``comm.scatter``, ``comm.allgather``,
``comm.alltoall``), which records each call in the op log.
"""

import typing

import numpy


class ArrayMeta(typing.NamedTuple):
    """Shape and dtype of an array (what a gradient must look like)."""

    shape: tuple
    dtype: str

    @classmethod
    def of(cls, array):
        return cls(tuple(int(d) for d in array.shape), numpy.dtype(array.dtype).str)


def conform(array, meta, what):
    """``array`` checked against ``meta``: same shape and dtype, else a clear error."""
    if array is None or tuple(array.shape) != tuple(meta.shape):
        got = None if array is None else tuple(array.shape)
        raise RuntimeError(
            f"{what}: expected an array of shape {tuple(meta.shape)} but received shape {got}. "
            "The two sides' communications are paired in a different order (or with "
            "different tags); make both ranks issue matching send/recv calls in the same order."
        )
    return array.astype(numpy.dtype(meta.dtype), copy=False)


def zeros(meta, xp):
    return xp.zeros(meta.shape, dtype=numpy.dtype(meta.dtype))


def on_device(arrays, xp):
    return tuple(xp.asarray(a) for a in arrays)


def check_peer(comm, rank, what):
    """Reject a point-to-point peer that would deadlock or does not exist."""
    if isinstance(rank, bool) or not isinstance(rank, (int, numpy.integer)):
        raise TypeError(f"{what}: rank must be an int, got {rank!r}")
    if rank == comm.rank:
        raise ValueError(
            f"{what}: rank={rank} is this process's own rank; sending to or receiving from "
            "oneself would deadlock. Pass the rank of another process."
        )
    if not 0 <= rank < comm.size:
        raise ValueError(f"{what}: rank={rank} is outside the communicator (ranks 0..{comm.size - 1}).")


def check_root(comm, root, what):
    """Every rank evaluates the same root and size, so all raise together."""
    if isinstance(root, bool) or not isinstance(root, (int, numpy.integer)) or not 0 <= root < comm.size:
        raise ValueError(f"{what}: root={root!r} is outside the communicator (ranks 0..{comm.size - 1}).")


# -- point to point ---------------------------------------------------------


def send(comm, arrays, dest, tag):
    """Send a tuple of arrays (the communicator sends their shapes first)."""
    comm.send(tuple(arrays), dest, tag)


def recv(comm, source, tag):
    """Receive the tuple sent by :func:`send`."""
    ys = comm.recv(source, tag)
    return ys if isinstance(ys, tuple) else (ys,)


def recv_known(comm, metas, source, tag, what):
    """Backward pass: receive gradients that must match ``metas``."""
    ys = recv(comm, source, tag)
    if len(ys) != len(metas):
        raise RuntimeError(
            f"{what}: expected {len(metas)} gradient arrays, received {len(ys)}; "
            "send/recv calls are paired in a different order on the two ranks."
        )
    return tuple(conform(y, m, what) for y, m in zip(ys, metas))


# -- collectives --------------------------------------------------------------


def bcast(comm, array, root):
    """Root's array on every rank (``array`` is ignored elsewhere)."""
    return comm.bcast(array if comm.rank == root else None, root=root)


def gather(comm, array, root):
    """A tuple of every rank's array on root, None elsewhere."""
    ys = comm.gather(array, root=root)
    return None if comm.rank != root else tuple(ys)


def scatter(comm, arrays, root):
    """Root's ``arrays[j]`` on rank j (a wrong count raises on every rank)."""
    return comm.scatter(tuple(arrays) if comm.rank == root else None, root=root)


def allgather(comm, array):
    return tuple(comm.allgather(array))


def alltoall(comm, arrays):
    return tuple(comm.alltoall(tuple(arrays)))
