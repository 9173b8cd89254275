"""overlap=True across fake nodes (MNFRAME_FAKE_NODE_SIZE=2): 2 nodes x 2 ranks, and 2 + 1 (uneven)."""

import pytest
from test_opt_overlap import _train  # noqa: E402 (tests/mpi is on sys.path)

import mnframe as chainermn

MPI_SIZES = (3, 4)
MPI_TIMEOUT = 180
MPI_ENV = {"MNFRAME_FAKE_NODE_SIZE": "2"}


@pytest.mark.parametrize("name", ["two_dimensional", "hierarchical", "flat"])
@pytest.mark.parametrize("wire", [None, "float16"])
def test_bitwise_across_nodes(name, wire):
    comm = chainermn.create_communicator(name, allreduce_grad_dtype=wire)
    assert comm.inter_size == 2
    plain, _, _ = _train(comm, overlap=False, steps=3)
    over, stats, _ = _train(comm, overlap=True, steps=3, bucket_cap_mb=0.02)
    for (pname, a), (_, b) in zip(sorted(plain.namedparams()), sorted(over.namedparams())):
        assert a.array.tobytes() == b.array.tobytes(), pname
    assert stats[-1]["started_in_backward"] >= 1
    comm.finalize()
