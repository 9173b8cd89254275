"""``non_cuda_aware``: GPU gradients averaged over MPI through host memory.

For MPIs that cannot read device memory: gradients are copied from the GPU
into the host shared-memory segment, averaged there by the two_dimensional
algorithm (so it keeps the node structure), and copied back to the GPU. CuPy is
imported only when the communicator is created (the factory checks CUDA first).
"""
from mnframe.communicators.mpi_communicator import MpiCommunicator
from mnframe.communicators.two_dimensional import TwoDimensionalReducer


class HostStagedReducer(TwoDimensionalReducer):
    def __init__(self, mpi_comm, topology):
        import cupy
        self._cupy = cupy
        super().__init__(mpi_comm, topology)

    def mean(self, layout, params):
        cupy = self._cupy
        buffer = self._buffer(layout)
        for g, arr in zip(layout.groups, layout.group_arrays(buffer.buf)):
            for e in g.entries:
                grad = params[e.index][1].grad
                dst = arr[e.offset:e.offset + e.size].reshape(e.shape)
                if grad is None:
                    dst.fill(0)
                else:
                    dst[...] = cupy.asnumpy(grad)
        self.reduce(layout, buffer)
        for g, arr in zip(layout.groups, layout.group_arrays(buffer.buf)):
            for e in g.entries:
                p = params[e.index][1]
                dev = cupy.asarray(arr[e.offset:e.offset + e.size].reshape(e.shape)).astype(p.array.dtype, copy=False)
                if p.grad is not None and p.grad.shape == dev.shape:
                    p.grad[...] = dev
                else:
                    p.grad = dev

    def _drop(self, buffer):
        buffer.free()  # gradients live on the GPU: nothing points into the host segments


class NonCudaAwareCommunicator(MpiCommunicator):
    """GPU gradients staged through host shared memory; MPI never sees device pointers."""

    reducer_class = HostStagedReducer
    grad_devices = frozenset({"cupy"})


