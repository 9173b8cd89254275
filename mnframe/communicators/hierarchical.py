"""``hierarchical``: reduce in the node, allreduce between node leaders, broadcast in the node.

The intra-node reduce is parallel through shared memory: each node rank sums
its slice of every segment (scaled by 1/size) into the leader's segment. The
leader (intra_rank 0) allreduces its whole segment with the other leaders over
MPI; then each node rank copies its slice of the leader's result into every
other segment (the broadcast). On one node the leader step is skipped and the
reduce writes straight to every segment.
"""

from mnframe.communicators.host_kernels import mean_into, slice_bounds
from mnframe.communicators.mpi_communicator import MpiCommunicator
from mnframe.communicators.shm import ShmReducer


class HierarchicalReducer(ShmReducer):
    def reduce(self, layout, buffer):
        topo = self.topo
        scale = 1.0 / self.comm.size
        views = buffer.peer_group_arrays(layout)
        me = topo.intra_rank
        single = topo.inter_size == 1
        self.fence(buffer, "hier:packed")
        for gi, g in enumerate(layout.groups):
            lo, hi = slice_bounds(g.size, topo.intra_size, me)
            slices = [v[gi][lo:hi] for v in views]
            mean_into(slices, slices if single else [slices[0]], scale)
        if not single:
            self.fence(buffer, "hier:reduced")
            if me == 0:
                for arr in views[0]:
                    self.inter_node_sum(arr, layout.wire)
            self.fence(buffer, "hier:leaders")
            for gi, g in enumerate(layout.groups):
                lo, hi = slice_bounds(g.size, topo.intra_size, me)
                for v in views[1:]:
                    v[gi][lo:hi] = views[0][gi][lo:hi]
        self.fence(buffer, "hier:done")


class HierarchicalCommunicator(MpiCommunicator):
    """Shared-memory reduce in the node, leaders' allreduce, shared-memory broadcast."""

    # GPU reducers are "module:attr" strings, imported on first use: device_reducers builds on the
    # CPU reducers' modules (naming its classes here would be an import cycle) and CPU jobs never load it.
    reducers = {"numpy": HierarchicalReducer, "cupy": "mnframe.communicators.device_reducers:NcclHierarchicalReducer"}
