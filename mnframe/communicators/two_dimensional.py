"""``two_dimensional``: shared-memory reduce-scatter in the node, allreduce across nodes, allgather.

Each node rank owns one slice of every dtype group. It sums that slice over the
segments of all node ranks (scaled by 1/size in the same pass), allreduces its
slice with the ranks that own the same slice on the other nodes, and writes the
result into every node segment. On one node the three steps fuse into a single
pass: read every segment's slice once, write it once (``kernels.mean_into``).
This is the default CPU communicator (see registry.default_name).

Nodes with different rank counts cannot pair slices across nodes; there the
hierarchical algorithm runs instead (decided identically on every rank).
"""
from mnframe.communicators import p2p_collectives as pc
from mnframe.communicators.hierarchical import HierarchicalReducer
from mnframe.communicators.kernels import mean_into, slice_bounds
from mnframe.communicators.mpi_communicator import MpiCommunicator
from mnframe.communicators.shm import ShmReducer


class TwoDimensionalReducer(ShmReducer):
    def reduce(self, layout, buffer):
        topo = self.topo
        if not topo.uniform:
            return HierarchicalReducer.reduce(self, layout, buffer)
        scale = 1.0 / self.comm.size
        views = buffer.group_arrays(layout)
        me = topo.intra_rank
        self.fence(buffer, "2d:packed")
        for gi, g in enumerate(layout.groups):
            lo, hi = slice_bounds(g.size, topo.intra_size, me)
            slices = [v[gi][lo:hi] for v in views]
            if topo.inter_size == 1:
                mean_into(slices, slices, scale)
                continue
            mean_into(slices, [slices[me]], scale)
            pc.allreduce_inplace(topo.inter_comm, slices[me])
            for q, s in enumerate(slices):
                if q != me:
                    s[...] = slices[me]
        self.fence(buffer, "2d:done")


class TwoDimensionalCommunicator(MpiCommunicator):
    """Reduce-scatter in the node (shared memory), allreduce per slice across nodes, allgather."""

    reducer_class = TwoDimensionalReducer
