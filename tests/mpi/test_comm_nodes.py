"""Hierarchical paths on 2 fake nodes x 2 ranks (MNFRAME_FAKE_NODE_SIZE=2 on one machine)."""

import numpy as np
import pytest

import mnframe as chainermn
from mnframe.communicators import registry

MPI_SIZES = (4,)
MPI_TIMEOUT = 120
MPI_ENV = {"MNFRAME_FAKE_NODE_SIZE": "2"}


def test_topology():
    comm = chainermn.create_communicator("naive")
    assert (comm.inter_size, comm.intra_size) == (2, 2)
    assert (comm.inter_rank, comm.intra_rank) == divmod(comm.rank, 2)
    sub = comm.split(0, -comm.rank)  # reversed ranks: node identity follows the process, not the rank
    assert sub.rank == comm.size - 1 - comm.rank
    assert (sub.inter_size, sub.intra_size) == (2, 2)
    assert sub.inter_rank == sub.rank // 2  # nodes are numbered by their lowest rank
    sub.finalize()
    comm.finalize()


def test_single_node_refuses_two_nodes():
    with pytest.raises(ValueError, match="single_node communicator needs every rank on one node"):
        chainermn.create_communicator("single_node")


@pytest.mark.parametrize("name", [n for n in registry.cpu_names() if n not in ("dummy", "single_node")])
@pytest.mark.parametrize("wire", [None, np.float16])
def test_mean_over_nodes(name, wire):
    import chainer
    import chainer.links as L

    comm = chainermn.create_communicator(name, allreduce_grad_dtype=wire)
    m = chainer.Sequential(L.Linear(5, 3), L.Linear(3, 2))
    m(np.zeros((1, 5), np.float32))
    for i, (_, p) in enumerate(sorted(m.namedparams())):
        p.grad = np.full(p.shape, 4.0 * comm.rank + i, np.float32)
    for _ in range(2):
        comm.multi_node_mean_grad(m)
        for i, (_, p) in enumerate(sorted(m.namedparams())):
            np.testing.assert_allclose(p.grad, 4.0 * (comm.size - 1) / 2 + i, rtol=1e-3)
    comm.finalize()
