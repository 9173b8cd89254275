"""``dummy``: multi_node_mean_grad packs and unpacks but does not communicate.

For measuring everything except the gradient exchange (as in ChainerMN); the
other methods (send, bcast, ...) work normally. Gradients are NOT averaged.
"""

from mnframe.communicators.mpi_communicator import MpiCommunicator
from mnframe.communicators.reducer_base import GradReducer


class DummyReducer(GradReducer):
    def reduce(self, layout, buffer):
        pass


class DummyCommunicator(MpiCommunicator):
    """No gradient communication (benchmarking only)."""

    # GPU reducers are "module:attr" strings, imported on first use: device_reducers builds on the
    # CPU reducers' modules (naming its classes here would be an import cycle) and CPU jobs never load it.
    reducers = {"numpy": DummyReducer, "cupy": "mnframe.communicators.device_reducers:DummyDeviceReducer"}
