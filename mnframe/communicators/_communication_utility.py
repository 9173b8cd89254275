"""ChainerMN's private module ``chainermn.communicators._communication_utility``.

The helpers code written against ChainerMN calls (its own tests among them),
implemented on mnframe's parts: ``init_ranks`` reads mnframe's node discovery
(node_discovery.py), ``chunked_bcast_obj`` is mnframe's chunked object broadcast
(object_ops.py) with ChainerMN's argument checks, ``init_nccl_comm`` and
``_get_nccl_type_id`` use mnframe's NCCL table (nccl_ops.py).
"""

import numpy as np

from mnframe import nccl  # noqa: F401 - ChainerMN's module exposes it here too
from mnframe.communicators import node_discovery, object_ops
from mnframe.runtime.mpi_comm import MPI

INT_MAX = 2147483647  # the largest count one MPI call takes


def init_ranks(mpi_comm):
    """``[rank, intra_rank, intra_size, inter_rank, inter_size]`` of this process (collective)."""
    topo = node_discovery.discover(mpi_comm)
    try:
        return [topo.rank, topo.intra_rank, topo.intra_size, topo.inter_rank, topo.inter_size]
    finally:
        topo.free()


def init_intra_mpi_comm(mpi_comm, intra_rank, inter_rank):
    """The communicator of this node's ranks, ordered by ``intra_rank`` (collective)."""
    return mpi_comm.Split(inter_rank, intra_rank)


def init_inter_mpi_comm(mpi_comm, intra_rank, inter_rank):
    """The communicator of the ranks with this ``intra_rank`` on every node (collective)."""
    return mpi_comm.Split(intra_rank, inter_rank)


def init_nccl_comm(mpi_comm):
    """A ``cupy.cuda.nccl.NcclCommunicator`` over ``mpi_comm``'s ranks (collective; needs CUDA and NCCL)."""
    from mnframe.communicators.nccl_ops import NcclGroup

    return NcclGroup(mpi_comm).comm


def inter_allreduce_gpu(
    inter_mpi_comm, size, gpu_buffer_a, gpu_buffer_b, n_bytes_buffer, n_elems_per_node, n_bytes_per_node, cuda_stream
):
    """Average float32 ``gpu_buffer_b`` over ``inter_mpi_comm`` by blocks, result in ``gpu_buffer_b``.

    The buffers are ``_memory_utility.DeviceMemory``; block ``i`` (``n_elems_per_node``
    values) is summed on rank ``i`` of ``inter_mpi_comm``, divided by ``size`` and sent
    back to every rank (two alltoalls, as ChainerMN's hierarchical reduction does).
    """
    blocks = inter_mpi_comm.size
    cuda_stream.synchronize()
    inter_mpi_comm.Alltoall(
        [gpu_buffer_b.buffer(n_bytes_buffer), MPI.FLOAT], [gpu_buffer_a.buffer(n_bytes_buffer), MPI.FLOAT]
    )
    mean = gpu_buffer_a.array(blocks * n_elems_per_node).reshape(blocks, n_elems_per_node).sum(axis=0)
    mean *= 1.0 / size
    for i in range(blocks):
        gpu_buffer_a.from_device(mean, n_bytes_per_node, i * n_bytes_per_node)
    cuda_stream.synchronize()
    inter_mpi_comm.Alltoall(
        [gpu_buffer_a.buffer(n_bytes_buffer), MPI.FLOAT], [gpu_buffer_b.buffer(n_bytes_buffer), MPI.FLOAT]
    )


def chunked_bcast_obj(obj, mpi_comm, max_buf_len=256 * 1024 * 1024, root=0):
    """Broadcast a picklable ``obj`` from ``root`` in pieces of at most ``max_buf_len`` bytes.

    As in ChainerMN, ``0 < max_buf_len < INT_MAX`` and ``obj`` must be given on the
    root only (``None`` elsewhere); both are checked with ``assert``.
    """
    assert 0 < max_buf_len < INT_MAX, f"max_buf_len must be in 1..{INT_MAX - 1} (got {max_buf_len})"
    assert (obj is not None) == (mpi_comm.rank == root), "obj must be given on the root rank only"
    return object_ops.bcast_obj(mpi_comm, obj, max_buf_len=max_buf_len, root=root)


def _get_nccl_type_id(dtype):
    """The NCCL datatype constant for float16/32/64 (ValueError for other dtypes)."""
    from mnframe.communicators.nccl_ops import _TYPES

    name = _TYPES.get(np.dtype(dtype)) if np.dtype(dtype).kind == "f" else None
    if name is None:
        raise ValueError(f"dtype must be float16, float32, or float64 (got {np.dtype(dtype)})")
    return getattr(nccl, name)
