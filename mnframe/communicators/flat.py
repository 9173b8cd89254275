"""``flat``: pack all gradients into one persistent buffer, one MPI allreduce per dtype."""

import numpy as np

from mnframe.communicators import array_collectives as pc
from mnframe.communicators import wire_allreduce
from mnframe.communicators.mpi_communicator import MpiCommunicator
from mnframe.communicators.reducer_base import GradReducer, scale_inplace


class FlatReducer(GradReducer):
    def reduce(self, layout, buffer):
        scale = 1.0 / self.comm.size
        for arr in buffer.group_views(layout):
            if arr.dtype == np.float16:  # scaled in float32, in the same pass as the rounding
                wire_allreduce.allreduce_half(self.comm, arr, scale)
                continue
            pc.allreduce_inplace(self.comm, arr)
            scale_inplace(arr, scale)


class FlatCommunicator(MpiCommunicator):
    """One flat buffer and an in-place MPI allreduce over all ranks."""

    # GPU reducers are "module:attr" strings, imported on first use: device_reducers builds on the
    # CPU reducers' modules (naming its classes here would be an import cycle) and CPU jobs never load it.
    reducers = {"numpy": FlatReducer, "cupy": "mnframe.communicators.device_reducers:flat_reducer"}
