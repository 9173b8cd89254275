"""NCCL collectives on CuPy arrays, over the ranks of an mpi4py communicator.

``NcclGroup(mpi_comm)`` creates one NCCL communicator for the ranks of
``mpi_comm`` (rank 0 makes the unique id, MPI broadcasts it) and offers the
collectives the GPU reducers need, on CuPy arrays and the current CUDA stream.
CuPy is imported when a group is created, never at module import.

Creation never leaves a rank waiting: whether NCCL loads, whether two ranks
of the group share a GPU (NCCL does not support that and may hang) and whether
rank 0 got a unique id are decided together, and every rank raises the same error.
"""

import socket

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

        self._cupy = cupy
        self.size, self.rank = mpi_comm.size, mpi_comm.rank
        self.comm = None
        nccl, problem = _load_nccl()
        uid = None
        if problem is None and mpi_comm.rank == 0:
            try:
                uid = nccl.get_unique_id()
            except Exception as e:
                problem = f"ncclGetUniqueId failed on rank 0 ({type(e).__name__}: {e})"
        with oplog.op(f"{what}:check"):
            seen = mpi_comm.allgather((problem, _gpu_identity(cupy)))
        _raise_if_unusable(what, seen)
        self._nccl = nccl
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
            self.comm.allReduce(
                arr.data.ptr, arr.data.ptr, arr.size, self._type(arr), self._nccl.NCCL_SUM, self._stream()
            )

    def reduce(self, arr, root=0):
        """Sum into ``arr`` on ``root`` (in place); other ranks' ``arr`` is unchanged."""
        with oplog.op("nccl:reduce", array=arr, peer=root):
            self.comm.reduce(
                arr.data.ptr, arr.data.ptr, arr.size, self._type(arr), self._nccl.NCCL_SUM, root, self._stream()
            )

    def bcast(self, arr, root=0):
        with oplog.op("nccl:bcast", array=arr, peer=root):
            self.comm.bcast(arr.data.ptr, arr.size, self._type(arr), root, self._stream())

    def reduce_scatter_inplace(self, arr):
        """``arr`` (size divisible by the group size): this rank's block holds the block's sum."""
        count = arr.size // self.size
        mine = arr[self.rank * count : (self.rank + 1) * count]
        with oplog.op("nccl:reduce_scatter", array=arr):
            # in place: NCCL allows recvbuff == sendbuff + rank * recvcount
            self.comm.reduceScatter(
                arr.data.ptr, mine.data.ptr, count, self._type(arr), self._nccl.NCCL_SUM, self._stream()
            )
        return mine

    def allgather_inplace(self, arr):
        """Every rank's block of ``arr`` to every rank (size divisible by the group size)."""
        count = arr.size // self.size
        mine = arr[self.rank * count : (self.rank + 1) * count]
        with oplog.op("nccl:allgather", array=arr):
            # in place: NCCL allows sendbuff == recvbuff + rank * sendcount
            self.comm.allGather(mine.data.ptr, arr.data.ptr, count, self._type(arr), self._stream())

    def close(self):
        if self.comm is not None:
            self.comm.destroy()
            self.comm = None


def _load_nccl():
    """(module, None) or (None, why not): CuPy sets ``nccl.available`` False instead of raising."""
    try:
        from cupy.cuda import nccl
    except ImportError as e:
        return None, f"CuPy cannot load NCCL ({e})"
    if not getattr(nccl, "available", True):
        return None, "CuPy was built or installed without NCCL"
    return nccl, None


def _gpu_identity(cupy):
    """(host, PCI bus id or device number) of this rank's current GPU."""
    dev = cupy.cuda.Device()
    try:
        ident = dev.pci_bus_id
    except Exception:  # an old CuPy: the ordinal still tells ranks of one process set apart
        ident = str(dev.id)
    return socket.gethostname(), ident


def _raise_if_unusable(what, seen):
    """Raise the same error on every rank unless NCCL loads everywhere and no two ranks share a GPU."""
    problems = [f"rank {r}: {p}" for r, (p, _) in enumerate(seen) if p]
    if problems:
        from mnframe.cuda_env import nccl_hint

        raise RuntimeError(
            f"{what}: NCCL is not usable ({'; '.join(problems)}). Install it "
            f"({nccl_hint()}) or use communicator non_cuda_aware"
        )
    owners = {}
    for r, (_, gpu) in enumerate(seen):
        owners.setdefault(gpu, []).append(r)
    shared = {gpu: ranks for gpu, ranks in owners.items() if len(ranks) > 1}
    if shared:
        text = "; ".join(f"ranks {ranks} on GPU {gpu[1]} of {gpu[0]}" for gpu, ranks in shared.items())
        raise RuntimeError(
            f"{what}: NCCL needs one GPU per rank, but {text}. Start at most one rank per "
            f"GPU, or use communicator non_cuda_aware (averages through host memory)"
        )
