"""MPI-3 shared-memory segments for the intra-node step of the CPU reducers.

Every rank of a node allocates one segment of the layout's size in a shared
window (``MPI.Win.Allocate_shared`` over the node communicator) and maps the
segments of all its node peers, so a rank can read and write its peers'
gradients directly. ``ShmReducer`` is the base of the strategies built on it.
Synchronisation: ``fence()`` = memory sync + node barrier; a strategy calls it
before reading peers' data and before returning (so no rank reuses its segment
while a peer still reads it).
"""

import itertools

import numpy as np

from mnframe.communicators import array_collectives, packing, wire_allreduce
from mnframe.communicators.reducer_base import Buffer, GradReducer
from mnframe.runtime import oplog
from mnframe.runtime.mpi_comm import MPI


class SharedSegments(Buffer):
    """A shared window with one segment per node rank; ``buf`` is this rank's segment."""

    def __init__(self, intra_comm, nbytes):
        size = max(packing.ALIGN, -(-nbytes // packing.ALIGN) * packing.ALIGN)
        info = MPI.Info.Create()
        info.Set("alloc_shared_noncontig", "true")
        with oplog.op("shm:allocate", nbytes=size):
            self.win = MPI.Win.Allocate_shared(size, 1, info=info, comm=intra_comm)
        info.Free()
        self.win.Lock_all(MPI.MODE_NOCHECK)
        self.segments = []
        for r in range(intra_comm.size):
            mem, _ = self.win.Shared_query(r)
            self.segments.append(np.frombuffer(mem, dtype=np.uint8, count=size))
        super().__init__(self.segments[intra_comm.rank])
        self.peer_groups = None
        self._seq = next(_seq)
        _live[self._seq] = self

    def peer_group_arrays(self, layout):
        """[rank][group] typed arrays of every node rank's segment."""
        if self.peer_groups is None:
            self.peer_groups = [layout.group_arrays(s) for s in self.segments]
        return self.peer_groups

    def free(self):
        if _live.pop(self._seq, None) is None:
            return  # freed already
        self.segments = self.peer_groups = self.views = self.groups = self.buf = None
        self.win.Unlock_all()
        with oplog.op("shm:free"):
            self.win.Free()


_live = {}  # creation number -> SharedSegments not freed yet (strong: a dropped communicator's window stays open too)
_seq = itertools.count()


def free_all():
    """Free every shared window still open, in creation order (collective over each node).

    Called at exit once every rank got there (``runtime.watchdog``): MPICH's OFI netmod
    fails ``MPI_Finalize`` ("fabricclose failed ... Device or resource busy") while a
    window is still open, which turned a finished job's exit status into 15.
    """
    for key in sorted(_live):
        _live[key].free()


class ShmReducer(GradReducer):
    """Base of the reducers whose intra-node step goes through shared memory.

    ``allreduce_grad_dtype=float16`` means float16 on the wire: float32 gradients
    stay float32 in the shared segments (no conversion where no link is
    crossed) and go as float16 between nodes only (``inter_node_sum``).
    """

    def layout_dtype(self, wire):
        return None if wire is not None and np.dtype(wire) == np.float16 else wire

    def inter_node_sum(self, arr, wire, prepare=None, done=None):
        """Sum ``arr`` over the inter-node communicator in place: float32 as float16 on the wire when
        asked; float32/float64 by mnframe's pipelined exchange (chunked non-blocking messages, sums in
        node order: no element depends on how the buffer is cut, on any number of nodes).
        ``prepare(a, b)``/``done(a, b)``: fill ``arr[a:b]`` before it is sent / use it once summed
        (``wire_allreduce.allreduce_pipelined``); called around a plain allreduce for other dtypes."""
        if wire is not None and np.dtype(wire) == np.float16 and arr.dtype == np.float32:
            wire_allreduce.allreduce_float32_as_half(self.topo.inter_comm, arr, prepare, done)
        elif arr.dtype in (np.float32, np.float64):
            wire_allreduce.allreduce_exchange(self.topo.inter_comm, arr, prepare, done)
        else:
            if prepare is not None:
                prepare(0, arr.size)
            array_collectives.allreduce_inplace(self.topo.inter_comm, arr)
            if done is not None:
                done(0, arr.size)

    def allocate(self, layout):
        return SharedSegments(self.topo.intra_comm, layout.nbytes)

    def fence(self, buffer, what):
        buffer.win.Sync()
        with oplog.op(what):
            self.topo.intra_comm.Barrier()
        buffer.win.Sync()
