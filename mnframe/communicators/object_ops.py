"""Python-object operations (``*_obj``): pickle to bytes, move them as arrays.

Reusing the array operations gives objects the same chunking (payloads over
2 GiB) and the same shared verdict: an object that cannot be pickled on one
rank raises the same error on every rank instead of leaving peers waiting.
"""

import functools
import operator
import pickle

import numpy as np

from mnframe.communicators import array_collectives as pc

_EMPTY = np.empty(0, np.uint8)


def _dumps(obj):
    """(uint8 array, error string or None)."""
    try:
        return np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8), None
    except Exception as e:  # any pickling failure becomes a shared verdict
        return _EMPTY, f"cannot pickle {type(obj).__name__}: {e}"


def _loads(arr):
    return pickle.loads(memoryview(np.ascontiguousarray(arr)))


def send_obj(comm, obj, dest, tag=0):
    payload, error = _dumps(obj)
    if error:  # point-to-point: only the sender can know; raise before sending anything
        raise TypeError(f"send_obj to rank {dest}: {error}")
    pc.send(comm, payload, dest, tag)


def recv_obj(comm, source, tag=None, status=None):
    """Receive what ``send_obj`` sent (``tag`` None: any tag)."""
    return _loads(pc.recv(comm, source, tag, status=status))


def bcast_obj(comm, obj, max_buf_len=None, root=0):
    payload, error = _dumps(obj) if comm.rank == root else (None, None)
    return _loads(pc.bcast(comm, payload, root=root, max_buf_len=max_buf_len, error=error))


def gather_obj(comm, obj, root=0):
    payload, error = _dumps(obj)
    parts = pc.gather(comm, payload, root=root, error=error)
    return None if parts is None else [_loads(p) for p in parts]


def allgather_obj(comm, obj):
    payload, error = _dumps(obj)
    return [_loads(p) for p in pc.allgather(comm, payload, error=error)]


def allreduce_obj(comm, obj):
    """Sum (``+``) of every rank's object, added in rank order (the same result everywhere)."""
    return functools.reduce(operator.add, allgather_obj(comm, obj))
