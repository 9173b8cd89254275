"""``non_cuda_aware``: GPU gradients averaged over MPI through host memory.

For MPIs that cannot read device memory, and for several ranks sharing one GPU
(where NCCL refuses to run): the packed device buffer is copied to the host
shared-memory segment in one transfer, averaged there by the two_dimensional
algorithm (so it keeps the node structure), and copied back in one transfer
(``device_reducers.HostStagedReducer``).
"""

from mnframe.communicators.mpi_communicator import MpiCommunicator


class NonCudaAwareCommunicator(MpiCommunicator):
    """GPU gradients staged through host shared memory; MPI never sees device pointers."""

    # GPU reducers are "module:attr" strings, imported on first use: device_reducers builds on the
    # CPU reducers' modules (naming its classes here would be an import cycle) and CPU jobs never load it.
    reducers = {"cupy": "mnframe.communicators.device_reducers:HostStagedReducer"}
