"""Uneven nodes (2 + 1 ranks, MNFRAME_FAKE_NODE_SIZE=2 with 3 ranks): every CPU strategy still averages."""

import numpy as np
import pytest

import mnframe as chainermn
from mnframe.communicators import registry

MPI_SIZES = (3,)
MPI_TIMEOUT = 120
MPI_ENV = {"MNFRAME_FAKE_NODE_SIZE": "2"}


@pytest.mark.parametrize("name", [n for n in registry.cpu_names() if n not in ("dummy", "single_node")])
def test_mean_uneven(name):
    import chainer.links as L

    comm = chainermn.create_communicator(name)
    assert comm.inter_size == 2 and comm.intra_size == (2 if comm.rank < 2 else 1)
    m = L.Linear(4, 3)
    m(np.zeros((1, 4), np.float32))
    for _, p in m.namedparams():
        p.grad = np.full(p.shape, comm.rank, np.float32)
    comm.multi_node_mean_grad(m)
    for _, p in m.namedparams():
        np.testing.assert_allclose(p.grad, 1.0)
    assert comm.allreduce_obj(1) == 3
    comm.finalize()
