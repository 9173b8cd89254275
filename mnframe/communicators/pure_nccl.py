"""``pure_nccl``: GPU gradients averaged with one NCCL allreduce per dtype group.

The strategy is ``device_reducers.NcclAllReducer``: gradients packed into a
persistent device buffer (scaled by 1/size while packing, batched into one
kernel with ``batched_copy``), summed in place by ``ncclAllReduce`` on the
current stream, handed back as views. float16 on the wire
(``allreduce_grad_dtype='float16'``) halves the bytes of a float32 model.
"""

from mnframe.communicators.mpi_communicator import MpiCommunicator


class PureNcclCommunicator(MpiCommunicator):
    """NCCL allreduce of a packed device buffer (float16/32/64 on the wire)."""

    # GPU reducers are "module:attr" strings, imported on first use: device_reducers builds on the
    # CPU reducers' modules (naming its classes here would be an import cycle) and CPU jobs never load it.
    reducers = {"cupy": "mnframe.communicators.device_reducers:NcclAllReducer"}

    double_buffering = "nccl"  # create_multi_node_optimizer(double_buffering=True) overlaps on a CUDA stream
