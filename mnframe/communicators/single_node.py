"""``single_node``: all ranks on one node; one fused shared-memory pass (NCCL on GPUs).

The same algorithm as two_dimensional on one node. Created on several nodes it
raises (on every rank alike, since all ranks see the same topology).
"""

from mnframe.communicators.mpi_communicator import MpiCommunicator
from mnframe.communicators.two_dimensional import TwoDimensionalReducer


def require_one_node(topology):
    if topology.inter_size != 1:
        raise ValueError(
            f"single_node communicator needs every rank on one node, but the ranks span "
            f"{topology.inter_size} nodes; use 'two_dimensional' or 'hierarchical' instead"
        )


class SingleNodeCommunicator(MpiCommunicator):
    """One node only: fused shared-memory reduce-scatter + allgather (NCCL allreduce on GPUs).

    The two_dimensional reducer as is (registry row): on one node it is the
    fused pass, and ``__init__`` refuses several nodes."""

    # GPU reducers are "module:attr" strings, imported on first use: device_reducers builds on the
    # CPU reducers' modules (naming its classes here would be an import cycle) and CPU jobs never load it.
    reducers = {"numpy": TwoDimensionalReducer, "cupy": "mnframe.communicators.device_reducers:NcclSingleNodeReducer"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        try:
            require_one_node(self._topo)
        except ValueError:
            self._topo.free()
            raise
