"""``pure_nccl``: GPU gradients averaged with one NCCL allreduce per dtype group.

Gradients are packed into a persistent device buffer (CuPy), summed in place by
``ncclAllReduce`` on the current stream, scaled, and handed back as views. The
NCCL unique id travels over MPI from rank 0. CuPy/NCCL are imported only when
the communicator is created; the factory has already checked that they work.
Not exercised on this project's CPU-only CI machines (see the GPU issue).
"""
import numpy as np

from mnframe.communicators.mpi_communicator import MpiCommunicator
from mnframe.communicators.reducer_base import Buffer, GradReducer
from mnframe.runtime import oplog

_NCCL_TYPES = {  # numpy dtype -> name of the NCCL datatype constant
    np.dtype(np.float16): "NCCL_FLOAT16",
    np.dtype(np.float32): "NCCL_FLOAT32",
    np.dtype(np.float64): "NCCL_FLOAT64",
}


class NcclReducer(GradReducer):
    def __init__(self, mpi_comm, topology):
        import cupy
        from cupy.cuda import nccl
        super().__init__(mpi_comm, topology)
        self._cupy, self._nccl = cupy, nccl
        uid = nccl.get_unique_id() if mpi_comm.rank == 0 else None
        with oplog.op("nccl:init"):
            uid = mpi_comm.bcast(uid, root=0)
            self._comm = nccl.NcclCommunicator(mpi_comm.size, uid, mpi_comm.rank)

    def allocate(self, layout):
        return Buffer(self._cupy.empty(max(1, layout.nbytes), dtype=np.uint8))

    def reduce(self, layout, buffer):
        stream = self._cupy.cuda.get_current_stream()
        scale = 1.0 / self.comm.size
        for g, arr in zip(layout.groups, layout.group_arrays(buffer.buf)):
            nccl_type = getattr(self._nccl, _NCCL_TYPES[g.dtype])
            with oplog.op("nccl:allreduce", array=arr):
                self._comm.allReduce(arr.data.ptr, arr.data.ptr, arr.size, nccl_type,
                                     self._nccl.NCCL_SUM, stream.ptr)
            arr *= arr.dtype.type(scale)

    def close(self):
        super().close()
        self._comm.destroy()


class PureNcclCommunicator(MpiCommunicator):
    """NCCL allreduce of a packed device buffer (float16/32/64 on the wire)."""

    reducer_class = NcclReducer
    grad_devices = frozenset({"cupy"})
