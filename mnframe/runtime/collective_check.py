"""Debug mode: check that every rank issues the same collective, with matching shapes.

A mismatched collective (rank 0 in a broadcast, rank 1 in an allreduce) hangs or
silently corrupts data. With ``MNFRAME_DEBUG_COLLECTIVES=1`` (or ``enable(comm)``
called on every rank) an oplog listener allgathers each collective's signature
(operation, shape, dtype, calling line) over a private duplicate communicator
before the operation runs, and every rank raises the same
``CollectiveMismatch`` naming the first divergence. It costs one small
allgather per operation: for debugging only.

Limits: point-to-point operations (``POINT_TO_POINT``) are not checked, and the
check assumes collectives are issued on communicators spanning all ranks of the
communicator given to ``enable`` (data parallelism); model-parallel code that
issues collectives on sub-communicators should not use it.
"""

import os
import re
import traceback

from mnframe.runtime import oplog
from mnframe.runtime.errors import CollectiveMismatch

# Operations whose array shape and dtype must agree on every rank. Others
# (gather, scatter, alltoall, bcast on non-roots, ...) legitimately differ per rank.
SHAPE_MUST_MATCH = ("allreduce", "mean_grad", "reduce_scatter")
# Point-to-point operations: only the two peers take part, so they are not compared.
# An op is point-to-point if any dotted/colon part of its name is one of these
# ("send", "scatter_dataset.recv_len", ...).
POINT_TO_POINT = frozenset(
    {"send", "recv", "isend", "irecv", "sendrecv", "send_obj", "recv_obj", "send_len", "recv_len", "wait"}
)


def is_point_to_point(name):
    return any(part in POINT_TO_POINT for part in re.split(r"[.:]", name))


_state = {"matcher": None}


_SKIP_FILES = ("contextlib.py", "threading.py")


def _caller():
    """file:line of the innermost frame outside mnframe (and contextlib): the user's call."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for frame in reversed(traceback.extract_stack()):
        if not frame.filename.startswith(pkg) and not frame.filename.endswith(_SKIP_FILES):
            return f"{frame.filename}:{frame.lineno}"
    return "?"


class CollectiveMatcher:
    """Oplog listener comparing each collective's signature across ranks."""

    def __init__(self, mpi_comm):
        self.comm = mpi_comm.Dup()
        self.count = 0
        self._busy = False

    def signature(self, rec):
        strict = any(key in rec.name for key in SHAPE_MUST_MATCH)
        return {
            "op": rec.name,
            "shape": rec.shape if strict else None,
            "dtype": rec.dtype if strict else None,
            "at": _caller(),
        }

    def __call__(self, rec):
        if self._busy or is_point_to_point(rec.name):
            return
        self._busy = True
        try:
            self.count += 1
            mine = self.signature(rec)
            every = self.comm.allgather(mine)
        finally:
            self._busy = False
        keys = [(s["op"], s["shape"], s["dtype"]) for s in every]
        if len(set(keys)) > 1:
            detail = "; ".join(
                f"rank {r}: {s['op']}"
                + (f" shape {s['shape']} {s['dtype']}" if s["shape"] is not None else "")
                + f" at {s['at']}"
                for r, s in enumerate(every)
            )
            raise CollectiveMismatch(
                f"debug mode: ranks diverge at collective #{self.count}: {detail}. "
                f"Every rank must call the same communication operations in the same order "
                f"with matching shapes."
            )


def enable(mpi_comm):
    """Turn the check on (collective over ``mpi_comm``; once per process)."""
    if _state["matcher"] is None:
        _state["matcher"] = CollectiveMatcher(mpi_comm)
        oplog.get_log().listeners.append(_state["matcher"])
    return _state["matcher"]


def disable():
    matcher = _state["matcher"]
    if matcher is not None:
        oplog.get_log().listeners.remove(matcher)
        _state["matcher"] = None
