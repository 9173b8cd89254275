"""ChainerMN's module path ``chainermn.functions.batch_normalization``.

``get_communication_backend`` validates and resolves a multi-node batch
normalization backend name as ChainerMN does (``'nccl'`` needs a
``PureNcclCommunicator``; ``'auto'`` picks it for one). ``MultiNodeBNImplSelector``
returns mnframe's statistics exchange for that backend (``_MpiExchange``,
``_NcclExchange``: the per-channel numbers through host MPI or NCCL, which
``links/batch_normalization.py``'s function nodes use), not a Chainer
``GeneralBatchNormalizationImpl``: mnframe's MNBN has its own function node.
"""

import numpy
from chainer import backend

from mnframe.communicators import host_collectives
from mnframe.runtime import oplog
from mnframe.runtime.mpi_comm import mpi_comm_of

_NAMES = ("mpi", "nccl", "auto")


def get_communication_backend(comm, communication_backend="auto"):
    """``'mpi'`` or ``'nccl'``: the backend multi-node BN uses with ``comm``."""
    if communication_backend not in _NAMES:
        raise ValueError(
            f"MultiNodeBatchNormalization does not support {communication_backend}; use one of {', '.join(_NAMES)}"
        )
    from mnframe.communicators.pure_nccl import PureNcclCommunicator

    is_nccl = isinstance(comm, PureNcclCommunicator)
    if communication_backend == "nccl" and not is_nccl:
        raise ValueError(f"nccl is not supported in MultiNodeBatchNormalization when using {type(comm)}")
    if communication_backend == "auto":
        return "nccl" if is_nccl else "mpi"
    return communication_backend


class MultiNodeBNImplSelector:
    """Called with ``(batch_norm_func, inputs)``: the statistics exchange of backend ``communication_backend_name``."""

    def __init__(self, comm, communication_backend_name):
        self.comm = comm
        self.communication_backend_name = communication_backend_name

    def __call__(self, _batch_norm_func, _inputs):
        if self.communication_backend_name == "nccl":
            return _NcclExchange(self.comm)
        return _MpiExchange(self.comm)


# --------------------------------------------------------------------------- exchanges


class _MpiExchange:
    """Per-channel statistics through host MPI (works for NumPy and CuPy inputs)."""

    name = "mpi"

    def __init__(self, comm):
        self.comm = comm

    def allgather(self, xp, array):
        host = backend.CpuDevice().send(array)
        out = host_collectives.allgather_array(self.comm, host, name="mnbn.allgather_stats")
        return _to_xp(xp, out)

    def allreduce_sum(self, xp, array):
        host = backend.CpuDevice().send(array)
        out = host_collectives.allreduce_sum(self.comm, host, name="mnbn.allreduce_grad_stats")
        return _to_xp(xp, out)


class _NcclExchange:
    """Per-channel statistics through NCCL on the current CUDA device.

    Uses the communicator's ``nccl_comm`` when it has one, otherwise creates a
    NCCL communicator over the same ranks (once, collectively).
    """

    name = "nccl"

    def __init__(self, comm):
        self.comm = comm
        self._nccl_comm = None
        self._group = None

    def close(self):
        """Destroy the NCCL group this exchange created (not a communicator's own ``nccl_comm``)."""
        if self._group is not None:
            self._group.close()
            self._group = None
        self._nccl_comm = None

    @staticmethod
    def unavailable_reason():
        """None when CuPy, CUDA and NCCL are usable here (mnframe's one CUDA probe), else why not."""
        from mnframe import cuda_env

        info = cuda_env.probe()
        return info.problem or info.nccl_problem

    def _get_comm(self):
        if self._nccl_comm is None:
            own = getattr(self.comm, "nccl_comm", None)
            if own is not None:
                self._nccl_comm = own
            else:  # checks on every rank together that NCCL loads and no two ranks share a GPU
                from mnframe.communicators.nccl_ops import NcclGroup

                self._group = NcclGroup(mpi_comm_of(self.comm), "mnbn")
                self._nccl_comm = self._group.comm
                register = getattr(self.comm, "close_on_finalize", None)
                if register is not None:
                    register(self.close)
        return self._nccl_comm

    def allgather(self, xp, array):
        import cupy
        from cupy.cuda import nccl

        comm = self._get_comm()
        send = cupy.ascontiguousarray(cupy.asarray(array, dtype=numpy.float64))
        out = cupy.empty((comm.size(),) + send.shape, dtype=numpy.float64)
        stream = cupy.cuda.get_current_stream()
        with oplog.op("mnbn.nccl_allgather_stats", array=send):
            comm.allGather(send.data.ptr, out.data.ptr, send.size, nccl.NCCL_FLOAT64, stream.ptr)
        return out if xp is not numpy else cupy.asnumpy(out)

    def allreduce_sum(self, xp, array):
        import cupy
        from cupy.cuda import nccl

        comm = self._get_comm()
        send = cupy.ascontiguousarray(cupy.asarray(array, dtype=numpy.float64))
        out = cupy.empty_like(send)
        stream = cupy.cuda.get_current_stream()
        with oplog.op("mnbn.nccl_allreduce_grad_stats", array=send):
            comm.allReduce(send.data.ptr, out.data.ptr, send.size, nccl.NCCL_FLOAT64, nccl.NCCL_SUM, stream.ptr)
        return out if xp is not numpy else cupy.asnumpy(out)


def _to_xp(xp, host_array):
    return host_array if xp is numpy else xp.asarray(host_array)
