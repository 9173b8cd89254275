"""Gradient averaging for CuPy (GPU) gradients: one strategy per communicator name.

Every strategy packs the gradients into one persistent device buffer
(``DevicePacker``, batched or not), sums the buffer over all ranks, and
unpacks. Strategies that only *sum* get the 1/size scaling folded into the
packing kernel; strategies that run a CPU reducer on a host copy let that
reducer average.

==================  ==========================================================
name                GPU strategy
==================  ==========================================================
pure_nccl           NCCL allreduce over all ranks
single_node         NCCL allreduce inside the node (one node only)
hierarchical        NCCL reduce in the node, node leaders' allreduce over MPI,
                    NCCL broadcast in the node
two_dimensional     NCCL reduce-scatter in the node, per-slice allreduce over
                    MPI between nodes, NCCL allgather in the node
non_cuda_aware      the buffer copied to host shared memory, averaged there by
                    the CPU two_dimensional algorithm, copied back (no NCCL)
flat                MPI allreduce of the device buffer when the MPI is
                    CUDA-aware (``cuda_aware``), else of a host copy
naive               one MPI allreduce per gradient, device or host-staged alike
dummy               pack and unpack only
==================  ==========================================================

MPI between nodes reads device memory only when every rank's MPI reports
CUDA support (``cuda_aware.agreed``); otherwise it goes through host memory.
float16 always goes through host memory (MPI has no half type; its sum is a
host-side user op).
"""

import numpy as np

from mnframe.communicators import array_collectives as pc
from mnframe.communicators import cuda_aware
from mnframe.communicators.device_packing import DevicePacker
from mnframe.communicators.flat import FlatReducer
from mnframe.communicators.nccl_ops import NcclGroup
from mnframe.communicators.reducer_base import Buffer, GradReducer
from mnframe.communicators.two_dimensional import TwoDimensionalReducer
from mnframe.runtime import oplog


class DeviceReducer(GradReducer):
    """Pack (scaled when ``prescale``) into a device buffer, ``reduce`` (a sum), unpack."""

    prescale = True  # pack multiplies by 1/size, so ``reduce`` only has to sum
    nccl_scope = None  # the ranks one NCCL group spans: "world", "node", or None (no NCCL)

    def __init__(self, mpi_comm, topology, options=None):
        import cupy

        super().__init__(mpi_comm, topology, options)
        self._cupy = cupy
        self._packer = DevicePacker(cupy)

    def allocate(self, layout):
        return Buffer(self._cupy.empty(max(1, layout.nbytes), dtype=np.uint8))

    def mean(self, layout, params):
        buffer = self._buffer(layout)
        views = buffer.entry_views(layout)
        groups = buffer.group_views(layout)
        batched = bool(self.options.get("batched_copy"))
        scale = 1.0 / self.comm.size if self.prescale else 1.0
        self._packer.pack(layout, groups, views, params, scale, batched)
        self.reduce(layout, buffer)
        self._packer.unpack(layout, groups, views, params, batched)
        buffer.params = params

    def _drop(self, buffer):
        self._packer.forget(buffer.layout)
        super()._drop(buffer)


class DummyDeviceReducer(DeviceReducer):
    prescale = False

    def reduce(self, layout, buffer):
        pass


# ---------------------------------------------------------------- NCCL inside, MPI between nodes


class InterNodeSum:
    """Sums CuPy arrays over an MPI communicator: device buffers when the MPI is
    CUDA-aware (and the dtype is native to MPI), else through a host copy."""

    def __init__(self, mpi_comm, aware):
        import cupy

        self._cupy, self.comm, self.aware = cupy, mpi_comm, aware
        self._host = {}  # (size, dtype) -> reusable host array

    def __call__(self, arr):
        if arr.size == 0 or self.comm.size == 1:
            return
        self._cupy.cuda.get_current_stream().synchronize()  # MPI must see finished kernels
        if self.aware and arr.dtype != np.float16:
            pc.allreduce_inplace(self.comm, arr)
            return
        key = (arr.size, arr.dtype.str)
        host = self._host.get(key)
        if host is None:
            host = self._host[key] = np.empty(arr.size, dtype=arr.dtype)
        host = host.reshape(arr.shape)  # a view: CuPy's get(out=) and set() want the array's own shape
        with oplog.op("gpu:to_host", array=arr):
            arr.get(out=host)
        pc.allreduce_inplace(self.comm, host)
        with oplog.op("gpu:to_device", array=arr):
            arr.set(host)


class NcclAllReducer(DeviceReducer):
    """``pure_nccl``: one NCCL allreduce per dtype group over all ranks."""

    nccl_scope = "world"

    def __init__(self, mpi_comm, topology, options=None):
        super().__init__(mpi_comm, topology, options)
        self._nccl = NcclGroup(self._nccl_comm(mpi_comm, topology), type(self).__name__)

    def _nccl_comm(self, mpi_comm, _topology):
        return mpi_comm

    def reduce(self, layout, buffer):
        for arr in buffer.group_views(layout):
            self._nccl.allreduce(arr)

    def close(self):
        super().close()
        self._nccl.close()


class NcclSingleNodeReducer(NcclAllReducer):
    """``single_node``: NCCL allreduce over the node, which must hold every rank."""

    nccl_scope = "node"

    def _nccl_comm(self, _mpi_comm, topology):
        from mnframe.communicators.single_node import require_one_node

        require_one_node(topology)
        return topology.intra_comm


class NcclHierarchicalReducer(DeviceReducer):
    """``hierarchical``: NCCL reduce to the node leader, leaders' MPI allreduce, NCCL broadcast."""

    nccl_scope = "node"

    def __init__(self, mpi_comm, topology, options=None):
        super().__init__(mpi_comm, topology, options)
        self._node = NcclGroup(topology.intra_comm, "gpu:node")
        aware = cuda_aware.agreed(mpi_comm)
        self._between = InterNodeSum(topology.inter_comm, aware) if topology.inter_size > 1 else None

    def reduce(self, layout, buffer):
        for arr in buffer.group_views(layout):
            self._hierarchical(arr)

    def _hierarchical(self, arr):
        if self._between is None:
            self._node.allreduce(arr)
            return
        self._node.reduce(arr, root=0)
        if self.topo.intra_rank == 0:
            self._between(arr)  # inter_comm of intra_rank 0 = the node leaders
        self._node.bcast(arr, root=0)

    def close(self):
        super().close()
        self._node.close()


class NcclTwoDimensionalReducer(NcclHierarchicalReducer):
    """``two_dimensional``: NCCL reduce-scatter in the node, per-slice MPI allreduce
    across nodes, NCCL allgather. Uneven nodes cannot pair slices: hierarchical."""

    def reduce(self, layout, buffer):
        topo = self.topo
        for arr in buffer.group_views(layout):
            if self._between is None or not topo.uniform:
                self._hierarchical(arr)
                continue
            m = arr.size // topo.intra_size * topo.intra_size
            if m:
                body = arr[:m]
                self._between(self._node.reduce_scatter_inplace(body))
                self._node.allgather_inplace(body)
            if m < arr.size:  # fewer elements than node ranks left: every rank sums them
                tail = arr[m:]
                self._node.allreduce(tail)
                self._between(tail)


# ---------------------------------------------------------------- MPI on device or host memory


class HostStagedReducer(DeviceReducer):
    """The device buffer copied to host memory, averaged there by a CPU reducer
    (``host_reducer``), copied back: one transfer each way per step."""

    prescale = False  # the CPU reducer averages
    host_reducer = TwoDimensionalReducer

    def __init__(self, mpi_comm, topology, options=None):
        super().__init__(mpi_comm, topology, options)
        self._host = self.host_reducer(mpi_comm, topology, options)

    def reduce(self, layout, buffer):
        host = self._host._buffer(layout)
        n = layout.nbytes
        self._cupy.cuda.get_current_stream().synchronize()
        with oplog.op("gpu:to_host", nbytes=n):
            buffer.buf[:n].get(out=host.buf[:n])
        self._host.reduce(layout, host)
        with oplog.op("gpu:to_device", nbytes=n):
            buffer.buf[:n].set(host.buf[:n])

    def close(self):
        super().close()
        self._host.close()


class HostStagedFlatReducer(HostStagedReducer):
    host_reducer = FlatReducer


class MpiDeviceReducer(DeviceReducer):
    """``flat`` on a CUDA-aware MPI: the device buffer goes to MPI directly."""

    def __init__(self, mpi_comm, topology, options=None):
        super().__init__(mpi_comm, topology, options)
        self._sum = InterNodeSum(mpi_comm, aware=True)

    def reduce(self, layout, buffer):
        for arr in buffer.group_views(layout):
            self._sum(arr)


def flat_reducer(mpi_comm, topology, options=None):
    """``flat`` on GPUs: MPI on device memory when CUDA-aware (detected on every rank), else host-staged."""
    cls = MpiDeviceReducer if cuda_aware.agreed(mpi_comm) else HostStagedFlatReducer
    return cls(mpi_comm, topology, options)


class NaiveDeviceReducer(GradReducer):
    """``naive`` on GPUs: one allreduce per gradient (the reference), device or host-staged."""

    def __init__(self, mpi_comm, topology, options=None):
        import cupy

        super().__init__(mpi_comm, topology, options)
        self._cupy = cupy
        self._sum = InterNodeSum(mpi_comm, cuda_aware.agreed(mpi_comm))

    def mean(self, layout, params):
        cupy = self._cupy
        scale = 1.0 / self.comm.size
        for g in layout.groups:
            for e in g.entries:
                p = params[e.index][1]
                wire = (
                    cupy.zeros(e.shape, dtype=g.dtype)
                    if p.grad is None
                    else cupy.array(p.grad, dtype=g.dtype, order="C")
                )
                self._sum(wire)
                wire *= float(scale)
                p.grad = wire if wire.dtype == p.array.dtype else wire.astype(p.array.dtype)
