"""The per-rank log of communication operations.

Every communication mnframe issues (collective or point-to-point) runs inside
``with oplog.op(name, array=..., peer=...)``. The log keeps the last few
operations and the one in flight with its start time; the collective watchdog
(mnframe.runtime.watchdog) reads it to enforce deadlines and to write the report
that says which operation a rank was stuck in. Entering and leaving an op is a
few attribute writes: it is on the hot path.
"""

import collections
import contextlib
import threading
import time
import traceback

_MAIN_THREAD = threading.main_thread().ident

_HISTORY = 64


class OpRecord:
    __slots__ = ("seq", "name", "shape", "dtype", "nbytes", "peer", "comm_id", "start", "end", "stack")

    def __init__(self, seq, name, shape, dtype, nbytes, peer, comm_id):
        self.seq = seq
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.nbytes = nbytes
        self.peer = peer
        self.comm_id = comm_id
        self.start = time.monotonic()
        self.end = None
        self.stack = None  # filled in lazily by the watchdog when it reports

    def as_dict(self):
        return {
            "seq": self.seq,
            "op": self.name,
            "shape": self.shape,
            "dtype": self.dtype,
            "nbytes": self.nbytes,
            "peer": self.peer,
            "comm": self.comm_id,
            "elapsed_s": (self.end or time.monotonic()) - self.start,
            "finished": self.end is not None,
            "stack": self.stack,
        }


class OpLog:
    """Ring buffer of this rank's recent operations plus the one in flight."""

    def __init__(self, history=_HISTORY):
        self.seq = 0
        self.history = collections.deque(maxlen=history)
        self.current = None
        self.listeners = []  # callables(record) run on entry (e.g. the debug-mode matcher)

    @contextlib.contextmanager
    def op(self, name, array=None, peer=None, nbytes=None, comm_id=None):
        shape = dtype = None
        if array is not None:
            shape = tuple(getattr(array, "shape", ()))
            dtype = str(getattr(array, "dtype", type(array).__name__))
            if nbytes is None:
                nbytes = getattr(array, "nbytes", None)
        self.seq += 1
        rec = OpRecord(self.seq, name, shape, dtype, nbytes, peer, comm_id)
        if threading.get_ident() != _MAIN_THREAD:
            # another thread (the overlap's averaging): history only; the main thread's wait for it
            # is the op in flight the deadlines watch (interleaved enter/exit would corrupt ``current``)
            try:
                yield rec
            finally:
                rec.end = time.monotonic()
                self.history.append(rec)
            return
        outer = self.current
        self.current = rec
        try:
            # Listeners run inside the try: one that raises (the debug-mode
            # matcher naming a divergence) must not leave the op "in flight".
            for listener in self.listeners:
                listener(rec)
            yield rec
        finally:
            rec.end = time.monotonic()
            self.history.append(rec)
            self.current = outer

    def snapshot(self):
        """The history and the op in flight as plain dicts (for reports)."""
        recs = [r.as_dict() for r in self.history]
        if self.current is not None:
            cur = self.current.as_dict()
            cur["stack"] = cur["stack"] or "".join(traceback.format_stack())
            recs.append(cur)
        return recs


_LOG = OpLog()


def get_log():
    return _LOG


def op(name, array=None, peer=None, nbytes=None, comm_id=None):
    """Context manager that records one communication operation."""
    return _LOG.op(name, array=array, peer=peer, nbytes=nbytes, comm_id=comm_id)
