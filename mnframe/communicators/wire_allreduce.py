"""mnframe's own allreduce between nodes: few, large, non-blocking messages; sums in rank order.

Why not ``MPI_Allreduce``: MPI has no float16 sum, and an ``MPI.Op`` written in
Python (``mpi_types``) is called once per chunk MPI hands it, many small calls
that cost more than a slow link saves (the mnist MLP's 4.3 MB: 6-13 ms instead
of 0.2-0.7 ms); and MPI's summation order depends on its algorithm, so an
element's sum over 3+ ranks may depend on the message size (how the buffer was
cut). Every function here does the same:

1. reduce-scatter: rank r owns part r of the array (``slice_bounds``); every
   rank sends each peer that peer's part (non-blocking, all at once) and
   receives the peers' copies of its own part;
2. rank r sums the copies of its part in rank order (float16: in float32,
   rounded once at the end, scaled in the same pass), so no element's result
   depends on how the array was cut (the overlap's bitwise claim);
3. allgather: every rank sends its summed part to every peer.

Each rank sends 2 (n-1)/n of the array, what a ring sends. ``allreduce_half``:
float16 arrays, one round. ``allreduce_float32_as_half`` (float32 data, float16 on
the wire) and ``allreduce_exchange`` (float32/float64 as they are) are pipelined
(``allreduce_pipelined``): the array goes in chunks of ``CHUNK_BYTES`` per peer
message, so the link carries chunk k while this rank converts, sums or (through
the ``prepare`` hook) computes its node's mean of chunk k+1, and the allgather of
a chunk starts as soon as its sum is ready. Messages stay below MPI's 2 GiB limit.
"""

import threading

import numpy as np

from mnframe.communicators import half
from mnframe.communicators.host_kernels import slice_bounds
from mnframe.runtime import oplog
from mnframe.runtime.mpi_comm import MPI

PIECE = 1 << 28  # elements per round (512 MiB of float16)
# bytes per peer message (16 ms at 1 Gbit/s, 1.6 ms at 10). Measured at 1 Gbit/s on 2x2 and 3x1
# simulated nodes (BENCHMARKS.md section 6): 1 MiB 1.12x/1.14x the bound, 2 MiB 1.09x/1.07x,
# 4 MiB 1.08-1.10x, 16 MiB 1.10-1.14x; float16 best at 2 MiB (0.57x/0.55x of float32).
CHUNK_BYTES = 2 << 20
MIN_CHUNK = 1 << 16  # elements: smaller chunks cost more in per-message overhead than they overlap
PROGRESS_ELEMENTS = 1 << 18  # a chunk is prepared (node mean, conversion) in pieces of this, MPI polled between
_TAG = 0x4A1F


def allreduce_half(comm, arr, scale=1.0):
    """In place: ``arr`` (contiguous float16) = float16(scale * sum over ranks, summed in float32)."""
    flat = arr.reshape(-1)
    if comm.size == 1:
        if scale != 1:
            acc = np.empty(flat.size, np.float32)
            half.decode(flat, acc)
            half.encode(acc, flat, scale)
        return arr
    with oplog.op("allreduce:float16", array=arr):
        for s in range(0, flat.size, PIECE):
            _round(comm, flat[s : s + PIECE], scale)
    return arr


def _round(comm, buf, scale):
    n, me = comm.size, comm.rank
    parts = [slice_bounds(buf.size, n, r) for r in range(n)]
    lo, hi = parts[me]
    bits = buf.view(np.uint16)
    peers = [q for q in range(n) if q != me]
    # 1. reduce-scatter: my part from every peer, every peer's part to it
    inbox = {q: np.empty(hi - lo, np.uint16) for q in peers}
    recvs = {q: comm.Irecv([inbox[q], MPI.UINT16_T], source=q, tag=_TAG) for q in peers}
    sends = [comm.Isend([bits[parts[q][0] : parts[q][1]], MPI.UINT16_T], dest=q, tag=_TAG) for q in peers]
    # 2. sum in rank order, in float32, as the copies arrive in that order
    acc = np.empty(hi - lo, np.float32)
    first = True
    for q in range(n):
        if q == me:
            src = bits[lo:hi]
        else:
            recvs[q].Wait()
            src = inbox[q]
        half.decode(src.view(np.float16), acc, add=not first)
        first = False
    MPI.Request.Waitall(sends)  # my part of ``buf`` may be overwritten now
    half.encode(acc, bits[lo:hi], scale)
    # 3. allgather
    recvs = [comm.Irecv([bits[parts[q][0] : parts[q][1]], MPI.UINT16_T], source=q, tag=_TAG + 1) for q in peers]
    sends = [comm.Isend([bits[lo:hi], MPI.UINT16_T], dest=q, tag=_TAG + 1) for q in peers]
    MPI.Request.Waitall(recvs + sends)


def allreduce_float32_as_half(comm, arr, prepare=None, done=None):
    """In place: float32 ``arr`` = the sum over ranks with float16 on the wire (half the bytes).

    The same collective as ``allreduce_half`` for data kept in float32 (the
    shared-memory reducers keep their segments in float32 and use float16 only
    between nodes): every rank's contribution, its own included, is rounded to
    float16 once, the sum is taken in float32 in rank order and rounded to
    float16 once more, and every rank ends with that same rounded value. Each
    element is computed the same way however the array is cut (bitwise overlap).
    ``prepare``/``done``: see ``allreduce_pipelined``.
    """
    return allreduce_pipelined(comm, arr, True, prepare, done, "allreduce:float32-as-float16")


def allreduce_exchange(comm, arr, prepare=None, done=None):
    """In place: ``arr`` (contiguous float32/float64) = the sum over ranks, by the same exchange as
    ``allreduce_half`` without conversions: non-blocking messages, sums in rank order.
    ``prepare``/``done``: see ``allreduce_pipelined``."""
    return allreduce_pipelined(comm, arr, False, prepare, done, "allreduce:exchange")


_scratch = threading.local()  # per thread (the overlap's thread exchanges too): reused, no page faults per call


def _scratch_of(key, dtype, n):
    pool = _scratch.__dict__.setdefault("pool", {})
    buf = pool.get((key, dtype))
    if buf is None or buf.size < n:
        buf = pool[(key, dtype)] = np.empty(max(n, 1 << 12), dtype)
    return buf[:n]


def chunk_elements(itemsize, n_ranks):
    """Elements per pipeline chunk: ``CHUNK_BYTES`` of data per peer message, at least ``MIN_CHUNK``."""
    return max(MIN_CHUNK, (CHUNK_BYTES * n_ranks) // itemsize)


def allreduce_pipelined(comm, arr, wire_half=False, prepare=None, done=None, what="allreduce:exchange"):
    """In place: ``arr`` (1-d contiguous float32/float64) = the sum over ``comm``'s ranks, pipelined.

    The array is cut into chunks (``chunk_elements``); each chunk into one part per
    rank. For chunk k: ``prepare(a, b)`` (if given; called on consecutive pieces of
    the chunk, ``PROGRESS_ELEMENTS`` at most, in order) writes this rank's
    contribution to ``arr[a:b]`` (the shared-memory reducers' node mean: the CPU
    work of chunk k+1 runs while chunk k is on the wire), the peers' parts are
    sent (non-blocking; every receive is posted first), and every chunk whose
    parts have all arrived is summed in rank order and its sum sent to every peer
    (allgather). ``done(a, b)`` is called, in chunk order, once ``arr[a:b]`` holds
    the final sum. ``wire_half``: float32 with float16 on the wire, as
    ``allreduce_float32_as_half`` says. Each element is computed by the same
    operations however the array is cut, and every rank ends with the same bits.
    """
    flat = arr.reshape(-1)
    n_el = flat.size
    if comm.size == 1 or n_el == 0:
        for a, b in [(0, n_el)] if n_el else []:
            if prepare is not None:
                prepare(a, b)
            if done is not None:
                done(a, b)
        return arr
    with oplog.op(what, array=arr):
        _Pipeline(comm, flat, wire_half, prepare, done).run()
    return arr


class _Pipeline:
    """One pipelined allreduce (``allreduce_pipelined``): the chunks, their messages and their progress."""

    def __init__(self, comm, flat, wire_half, prepare, done):
        self.comm, self.flat, self.half = comm, flat, wire_half
        self.prepare, self.done = prepare, done
        n, me = comm.size, comm.rank
        self.n, self.me = n, me
        self.peers = [q for q in range(n) if q != me]
        step = chunk_elements(2 if wire_half else flat.itemsize, n)
        self.chunks = [(a, min(flat.size, a + step)) for a in range(0, flat.size, step)]
        # per chunk: [lo, hi) of each rank's part (absolute), and where my part's copies land
        self.parts = [
            [(a + x, a + y) for x, y in (slice_bounds(b - a, n, r) for r in range(n))] for a, b in self.chunks
        ]
        mine = sum(p[me][1] - p[me][0] for p in self.parts)
        if wire_half:
            self.dt = MPI.UINT16_T
            self.wire = _scratch_of("w", np.uint16, flat.size)  # float16 bits: what I send, then what I gather
            inbox_dtype = np.uint16
        else:
            self.dt = MPI._typedict[flat.dtype.char]
            self.wire = flat
            inbox_dtype = flat.dtype
        self.inbox = {q: _scratch_of(("in", i), inbox_dtype, mine) for i, q in enumerate(self.peers)}
        self.sends = []

    def run(self):
        comm, parts, me, peers, dt = self.comm, self.parts, self.me, self.peers, self.dt
        # every receive posted first (matched in order: one tag per phase)
        self.rs_recv, off = [], 0
        for p in parts:
            lo, hi = p[me]
            self.rs_recv.append([comm.Irecv([self.inbox[q][off : off + hi - lo], dt], q, _TAG + 2) for q in peers])
            off += hi - lo
        self.ag_recv = [[comm.Irecv([self.wire[p[q][0] : p[q][1]], dt], q, _TAG + 3) for q in peers] for p in parts]
        self.offsets = np.cumsum([0] + [p[me][1] - p[me][0] for p in parts]).tolist()
        self.summed = self.finished = 0
        for k, (a, b) in enumerate(self.chunks):
            # in pieces, with MPI polled between them: MPI moves queued messages only inside its calls,
            # and the socket's buffer drains in a few ms at 10 Gbit/s
            for x in range(a, b, PROGRESS_ELEMENTS):
                y = min(b, x + PROGRESS_ELEMENTS)
                if self.prepare is not None:
                    self.prepare(x, y)
                if self.half:
                    half.encode(self.flat[x:y], self.wire[x:y])  # my own part too: rounded like the peers'
                if self.sends:
                    MPI.Request.Testall(self.sends)
            self.sends += [comm.Isend([self.wire[parts[k][q][0] : parts[k][q][1]], dt], q, _TAG + 2) for q in peers]
            self._advance(k + 1, block=False)
        self._advance(len(self.chunks), block=True)
        MPI.Request.Waitall(self.sends)

    def _advance(self, ready, block):
        """Sum (and send) the chunks below ``ready`` whose parts have arrived, then finish the gathered ones."""
        while self.summed < ready:
            reqs = self.rs_recv[self.summed]
            if block:
                MPI.Request.Waitall(reqs)
            elif not MPI.Request.Testall(reqs):
                break
            self._sum(self.summed)
            self.summed += 1
        while self.finished < self.summed:
            reqs = self.ag_recv[self.finished]
            if block:
                MPI.Request.Waitall(reqs)
            elif not MPI.Request.Testall(reqs):
                break
            self._finish(self.finished)
            self.finished += 1
        if not block:
            MPI.Request.Testall(self.sends)  # lets MPI move what is queued

    def _sum(self, k):
        """My part of chunk k: the sum over ranks in rank order, sent to every peer."""
        lo, hi = self.parts[k][self.me]
        o = self.offsets[k]
        acc = self.flat[lo:hi]
        srcs = [None if q == self.me else self.inbox[q][o : o + hi - lo] for q in range(self.n)]
        if self.half:
            for i, src in enumerate(srcs):
                src = self.wire[lo:hi] if src is None else src
                half.decode(src.view(np.float16), acc, add=i > 0)
            half.encode_rounding(acc, self.wire[lo:hi])  # and acc = the rounded sum, as every peer will have it
        else:
            # rank order; a + b == b + a exactly, so the running sum lives in my part from my turn on
            # (before it, in the first peer's inbox: scratch of this call)
            me = self.me
            run = acc if me == 0 else srcs[0]
            for q in range(1, self.n):
                if q == me:
                    np.add(run, acc, out=acc)
                    run = acc
                else:
                    np.add(run, srcs[q], out=run)
        self.sends += [self.comm.Isend([self.wire[lo:hi], self.dt], q, _TAG + 3) for q in self.peers]

    def _finish(self, k):
        if self.half:
            for q in self.peers:
                lo, hi = self.parts[k][q]
                half.decode(self.wire[lo:hi].view(np.float16), self.flat[lo:hi])
        if self.done is not None:
            self.done(*self.chunks[k])
