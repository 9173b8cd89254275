"""NCCL collectives on CuPy arrays, over the ranks of an mpi4py communicator.

``NcclGroup(mpi_comm)`` creates one NCCL communicator for the ranks of
``mpi_comm`` (rank 0 makes the unique id, MPI broadcasts it) and offers the
collectives the GPU reducers need, on CuPy arrays and the current CUDA stream.
CuPy is imported when a group is created, never at module import.
"""
import numpy as np

from mnframe.runtime import oplog

_TYPES = {  # numpy dtype -> name of the NCCL datatype constant in cupy.cuda.nccl
    np.dtype(np.float16): "NCCL_FLOAT16",
    np.dtype(np.float32): "NCCL_FLOAT32",
    np.dtype(np.float64): "NCCL_FLOAT64",
}


def supported(dtype):
    return np.dtype(dtype) in _TYPES


class NcclGroup:
    """An NCCL communicator over the ranks of ``mpi_comm`` (collective to create)."""

    def __init__(self, mpi_comm, what="nccl"):
        import cupy
        try:
            from cupy.cuda import nccl
        except ImportError as e:
            raise RuntimeError(f"{what}: GPU gradients need NCCL, which CuPy cannot load ({e}); install "
                               f"it (pip install nvidia-nccl-cu12) or use communicator non_cuda_aware") from e
        self._cupy, self._nccl = cupy, nccl
        self.size, self.rank = mpi_comm.size, mpi_comm.rank
        uid = nccl.get_unique_id() if mpi_comm.rank == 0 else None
        with oplog.op(f"{what}:init"):
            uid = mpi_comm.bcast(uid, root=0)
            self.comm = nccl.NcclCommunicator(mpi_comm.size, uid, mpi_comm.rank)

    def _type(self, arr):
        name = _TYPES.get(np.dtype(arr.dtype))
        if name is None:
            raise TypeError(f"NCCL cannot reduce {arr.dtype} arrays (float16/32/64 only)")
        return getattr(self._nccl, name)

    def _stream(self):
        return self._cupy.cuda.get_current_stream().ptr

    def allreduce(self, arr):
        """Sum a contiguous CuPy array over the group, in place."""
        with oplog.op("nccl:allreduce", array=arr):
            self.comm.allReduce(arr.data.ptr, arr.data.ptr, arr.size, self._type(arr),
                                self._nccl.NCCL_SUM, self._stream())

    def reduce(self, arr, root=0):
        """Sum into ``arr`` on ``root`` (in place); other ranks' ``arr`` is unchanged."""
        with oplog.op("nccl:reduce", array=arr, peer=root):
            self.comm.reduce(arr.data.ptr, arr.data.ptr, arr.size, self._type(arr),
                             self._nccl.NCCL_SUM, root, self._stream())

    def bcast(self, arr, root=0):
        with oplog.op("nccl:bcast", array=arr, peer=root):
            self.comm.bcast(arr.data.ptr, arr.size, self._type(arr), root, self._stream())

    def reduce_scatter_inplace(self, arr):
        """``arr`` (size divisible by the group size): this rank's block holds the block's sum."""
        count = arr.size // self.size
        mine = arr[self.rank * count:(self.rank + 1) * count]
        with oplog.op("nccl:reduce_scatter", array=arr):
            # in place: NCCL allows recvbuff == sendbuff + rank * recvcount
            self.comm.reduceScatter(arr.data.ptr, mine.data.ptr, count, self._type(arr),
                                    self._nccl.NCCL_SUM, self._stream())
        return mine

    def allgather_inplace(self, arr):
        """Every rank's block of ``arr`` to every rank (size divisible by the group size)."""
        count = arr.size // self.size
        mine = arr[self.rank * count:(self.rank + 1) * count]
        with oplog.op("nccl:allgather", array=arr):
            # in place: NCCL allows sendbuff == recvbuff + rank * sendcount
            self.comm.allGather(mine.data.ptr, arr.data.ptr, count, self._type(arr), self._stream())

    def close(self):
        if self.comm is not None:
            self.comm.destroy()
            self.comm = None
