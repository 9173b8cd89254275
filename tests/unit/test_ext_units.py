"""Single-process checks of the links/extensions helpers (MPI.COMM_SELF as communicator)."""

import copy
import os

import chainer
import chainer.links as L
import numpy as np
import pytest
from mpi4py import MPI

from mnframe.extensions.checkpointer import _archive_problem, create_multi_node_checkpointer
from mnframe.extensions.observation_aggregator import _to_host, average_2d
from mnframe.extensions.snapshot import parse_replica_sets
from mnframe.links import MultiNodeBatchNormalization, create_mnbn_model


@pytest.mark.parametrize(
    "spec,size,expected",
    [
        ([0], 4, [{0}, {1, 2, 3}]),
        ([0, 1], 4, [{0}, {1}, {2, 3}]),
        ([[0, 1], [2, 3]], 4, [{0, 1}, {2, 3}]),
        ([], 4, [{0, 1, 2, 3}]),
        ([range(0, 8, 2)], 8, [set(range(0, 8, 2)), set(range(1, 8, 2))]),
        ([0], 1, [{0}]),
    ],
)
def test_parse_replica_sets(spec, size, expected):
    assert parse_replica_sets(spec, size) == expected


@pytest.mark.parametrize("spec,match", [([5], "outside"), ([[0, 1], [1]], "overlap"), ([[]], "empty")])
def test_parse_replica_sets_errors(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_replica_sets(spec, 4)


def test_archive_problem_detects_truncation_and_bit_flips(tmp_path):
    good = tmp_path / "good"
    with open(good, "wb") as f:
        np.savez(f, a=np.arange(1000))
    assert _archive_problem(str(good)) is None
    data = good.read_bytes()
    (tmp_path / "short").write_bytes(data[: len(data) // 2])
    assert _archive_problem(str(tmp_path / "short")) is not None
    flipped = bytearray(data)
    flipped[200] ^= 0xFF  # inside the stored array data
    (tmp_path / "flip").write_bytes(bytes(flipped))
    assert _archive_problem(str(tmp_path / "flip")) is not None
    assert _archive_problem(str(tmp_path / "missing")) is not None


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(name=""), "name"),
        (dict(name="a/b"), "name"),
        (dict(cp_interval=0), "cp_interval"),
        (dict(gc_interval=-1), "gc_interval"),
    ],
)
def test_checkpointer_argument_errors(kwargs, match):
    args = dict(name="run", comm=MPI.COMM_SELF)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        create_multi_node_checkpointer(**args)


def test_checkpointer_single_process_roundtrip(tmp_path):
    model = L.Linear(2, 2)
    cp = create_multi_node_checkpointer("solo", MPI.COMM_SELF, cp_interval=1, gc_interval=1, path=str(tmp_path))
    for it in (1, 2, 3):
        model.W.array[:] = it
        cp.save(model, it)
    assert sorted(os.listdir(tmp_path)) == ["solo.0.3"]  # collected once 1 + 1 generations existed
    model.W.array[:] = 0
    assert cp.maybe_load(model) == 3
    np.testing.assert_array_equal(model.W.array, 3)
    cp.finalize()
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="path="):
        create_multi_node_checkpointer("x", MPI.COMM_SELF).save(model)


def test_mnbn_backend_validation():
    with pytest.raises(ValueError, match="communication_backend"):
        MultiNodeBatchNormalization(3, MPI.COMM_SELF, communication_backend="gloo")
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is installed: the missing-NCCL error cannot be provoked")
    except ImportError:
        pass
    with pytest.raises(ValueError, match="nccl"):  # refused when the link is made, as ChainerMN does
        MultiNodeBatchNormalization(3, MPI.COMM_SELF, communication_backend="nccl")
    # 'auto' falls back to MPI without CuPy.
    y = MultiNodeBatchNormalization(3, MPI.COMM_SELF)(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_allclose(y.array.mean(axis=0), 0, atol=1e-6)


def test_mnbn_is_a_batch_normalization_and_copies_share_comm():
    bn = MultiNodeBatchNormalization(3, MPI.COMM_SELF)
    assert isinstance(bn, L.BatchNormalization)
    clone = copy.deepcopy(bn)
    assert clone.comm is bn.comm and clone.avg_mean is not bn.avg_mean
    converted = create_mnbn_model(L.BatchNormalization(3, use_beta=False), MPI.COMM_SELF)
    assert isinstance(converted, MultiNodeBatchNormalization) and converted.beta is None
    with pytest.raises(TypeError, match="chainer.Link"):
        create_mnbn_model(object(), MPI.COMM_SELF)


def test_observation_helpers():
    assert average_2d([[1.0, 2.0], [3.0]]) == pytest.approx(2.0)
    assert average_2d([[], []]) is None
    assert _to_host(chainer.Variable(np.array(2.5, np.float32))) == 2.5
    assert isinstance(_to_host(np.float32(1.5)), float)
    np.testing.assert_array_equal(_to_host(np.arange(3)), np.arange(3))
    assert _to_host(7) == 7
