"""``naive``: one MPI allreduce per parameter, no flat buffer (ChainerMN's testing communicator).

Kept simple on purpose: it is the reference the other strategies are tested
against. float16 on the wire or mixed dtypes go through a temporary per param.
"""

import numpy as np

from mnframe.communicators import array_collectives as pc
from mnframe.communicators import half, wire_allreduce
from mnframe.communicators.mpi_communicator import MpiCommunicator
from mnframe.communicators.reducer_base import GradReducer, scale_inplace


class NaiveReducer(GradReducer):
    def mean(self, layout, params):
        scale = 1.0 / self.comm.size
        for g in layout.groups:
            for e in g.entries:
                p = params[e.index][1]
                grad = p.grad
                if grad is None:
                    grad = np.zeros(e.shape, dtype=p.array.dtype)
                if grad.dtype == g.dtype and grad.flags.c_contiguous and grad.flags.writeable:
                    wire = grad
                else:
                    wire = np.empty(e.shape, dtype=g.dtype)  # a writable copy (float16: half.to_half)
                    (half.to_half if wire.dtype == np.float16 else _cast)(grad, wire)
                if wire.dtype == np.float16:
                    wire_allreduce.allreduce_half(self.comm, wire, scale)
                else:
                    pc.allreduce_inplace(self.comm, wire)
                    scale_inplace(wire, scale)
                if wire is grad:
                    if p.grad is not grad:
                        p.grad = grad  # a zero-filled gradient
                elif p.grad is None or not p.grad.flags.writeable:
                    p.grad = np.empty(p.array.shape, p.array.dtype)
                if wire is not p.grad:
                    (half.from_half if wire.dtype == np.float16 else _cast)(wire, p.grad)


def _cast(src, dst):
    np.copyto(dst, src, casting="unsafe")


class NaiveCommunicator(MpiCommunicator):
    """Per-parameter MPI allreduce; works on any placement, CPU or GPU arrays."""

    # GPU reducers are "module:attr" strings, imported on first use: device_reducers builds on the
    # CPU reducers' modules (naming its classes here would be an import cycle) and CPU jobs never load it.
    reducers = {"numpy": NaiveReducer, "cupy": "mnframe.communicators.device_reducers:NaiveDeviceReducer"}
