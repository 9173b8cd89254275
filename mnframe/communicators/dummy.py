"""``dummy``: multi_node_mean_grad packs and unpacks but does not communicate.

For measuring everything except the gradient exchange (as in ChainerMN); the
other methods (send, bcast, ...) work normally. Gradients are NOT averaged.
"""

from mnframe.communicators.mpi_communicator import MpiCommunicator
from mnframe.communicators.reducer_base import GradReducer


class DummyReducer(GradReducer):
    def reduce(self, layout, buffer):
        pass


class DummyCommunicator(MpiCommunicator, registry_name="dummy"):
    """No gradient communication (benchmarking only)."""
