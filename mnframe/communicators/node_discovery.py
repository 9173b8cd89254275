"""Node discovery: which ranks of a communicator share a machine.

Ranks are grouped by the shared-memory domain MPI reports
(``Split_type(COMM_TYPE_SHARED)``) together with the host name, so the result is
right for any placement of ranks on hosts (round-robin, uneven, ...). Node
indices follow the lowest rank on each node; ``intra_rank`` orders ranks inside
a node by rank.

Testing several nodes on one machine: with ``MNFRAME_FAKE_NODE_SIZE=k`` in the
environment, the node of a rank is additionally split by ``world_rank // k``.
The fake nodes stay inside one real shared-memory node, so the shared-memory
paths keep working; 4 ranks with k=2 look like 2 nodes x 2 ranks.
"""

import dataclasses
import os
import socket

from mnframe.runtime import oplog
from mnframe.runtime.mpi_comm import MPI

FAKE_NODE_SIZE_ENV = "MNFRAME_FAKE_NODE_SIZE"


@dataclasses.dataclass(frozen=True)
class Topology:
    """Rank layout of one communicator, plus the node-level sub-communicators.

    ``intra_comm``: the ranks of this node. ``inter_comm``: the ranks that have
    this rank's ``intra_rank`` on every node (rank ``inter_rank`` in it); for
    ``intra_rank == 0`` that is the communicator of node leaders.
    """

    rank: int
    size: int
    intra_rank: int
    intra_size: int
    inter_rank: int
    inter_size: int
    node_sizes: tuple
    intra_comm: object
    inter_comm: object
    uniform: bool  # every node runs the same number of ranks

    def free(self):
        for c in (self.intra_comm, self.inter_comm):
            if c != MPI.COMM_NULL:
                with oplog.op("topology:free"):
                    c.Free()


def _fake_node_size():
    value = os.environ.get(FAKE_NODE_SIZE_ENV)
    if not value:
        return None
    try:
        k = int(value)
    except ValueError:
        k = 0
    if k < 1:
        raise ValueError(f"{FAKE_NODE_SIZE_ENV}={value!r}: expected a positive integer (ranks per fake node)")
    return k


def _node_key(mpi_comm):
    """A key equal on exactly the ranks that share a node (before fake splitting)."""
    world_rank = MPI.COMM_WORLD.rank
    with oplog.op("topology:split_type"):
        shared = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED, key=mpi_comm.rank)
    try:
        with oplog.op("topology:leader"):
            leader = shared.allreduce(world_rank, op=MPI.MIN)
    finally:
        with oplog.op("topology:free"):
            shared.Free()
    key = (socket.gethostname(), leader)
    k = _fake_node_size()
    if k is not None:
        key = key + (world_rank // k,)
    return key


def discover(mpi_comm):
    """Compute the Topology of ``mpi_comm`` (collective over it)."""
    key = _node_key(mpi_comm)
    with oplog.op("topology:allgather"):
        keys = mpi_comm.allgather(key)
    order = {}
    for k in keys:  # node index = order of first appearance by rank
        order.setdefault(k, len(order))
    nodes = [order[k] for k in keys]
    me = nodes[mpi_comm.rank]
    node_sizes = tuple(nodes.count(i) for i in range(len(order)))
    intra_rank = nodes[: mpi_comm.rank].count(me)
    with oplog.op("topology:split"):
        intra_comm = mpi_comm.Split(me, mpi_comm.rank)
        inter_comm = mpi_comm.Split(intra_rank, mpi_comm.rank)
    return Topology(
        rank=mpi_comm.rank,
        size=mpi_comm.size,
        intra_rank=intra_rank,
        intra_size=node_sizes[me],
        inter_rank=me,
        inter_size=len(order),
        node_sizes=node_sizes,
        intra_comm=intra_comm,
        inter_comm=inter_comm,
        uniform=len(set(node_sizes)) == 1,
    )
