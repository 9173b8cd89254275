"""ChainerMN 7.8.1 behaviours its own tests check (issue 24), under mpiexec: communicator configuration
(set_config/get_config/config_scope, ``batched_copy``), ``recv_obj(status=...)``, the debug-mode
"diverged" check, MultiNodeBatchNormalization's dtype, and the multi-node iterator's TypeError."""

import chainer
import numpy as np
import pytest
from mpi4py import MPI

import mnframe as chainermn

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 180


@pytest.fixture(scope="module")
def comm():
    c = chainermn.create_communicator("naive")
    yield c
    c.finalize()


# -- configuration

# mnframe's own configs (docs/powersgd.md), listed by get_config() beside ChainerMN's two
POWERSGD_OFF = {"compression": None, "powersgd_rank": 4, "powersgd_start_iter": 10}


def test_batched_copy_is_a_config_and_an_attribute(comm):
    assert comm.batched_copy is True and comm.get_config("batched_copy") is True  # create_communicator's default
    other = chainermn.create_communicator("flat", batched_copy=False)
    assert other.batched_copy is False and comm.batched_copy is True  # per instance
    other.set_config("batched_copy")  # value defaults to True
    assert other.batched_copy is True and other.get_config("batched_copy") is True
    other.batched_copy = 0  # assigning is set_config: checked and normalised
    assert other.get_config("batched_copy") is False
    assert other.get_config() == {"batched_copy": False, "allreduce_grad_dtype": None, **POWERSGD_OFF}
    with pytest.raises(ValueError, match="unknown communicator config 'blah blah blah'"):
        other.set_config("blah blah blah")
    with pytest.raises(KeyError):  # ChainerMN's get_config raises KeyError for a name it never saw
        other.get_config("nope")
    other.finalize()


def test_config_scope_records_attributes_per_instance(comm):
    other = chainermn.create_communicator("naive")
    with other.config_scope():
        assert other.within_config_scope
        other.foobar = "0xdeadbeef"
    assert not other.within_config_scope
    other.not_a_config = 1  # outside the scope: a plain attribute
    assert other._configs["foobar"] == "0xdeadbeef" and other.get_config("foobar") == "0xdeadbeef"
    assert "not_a_config" not in other._configs
    assert "foobar" not in comm._configs  # ChainerMN's class-level dict would share it
    sub = other.split(0, other.rank)  # the known configs travel, the scope's extras do not
    assert sub.get_config() == {"batched_copy": True, "allreduce_grad_dtype": None, **POWERSGD_OFF}
    sub.finalize()
    other.finalize()


# -- recv_obj(status=...)


def test_recv_obj_fills_status(comm):
    if comm.size == 1:
        pytest.skip("needs a peer")
    if comm.rank == 0:
        for r in range(1, comm.size):
            comm.send_obj({"to": r}, dest=r, tag=r + 10)
            comm.send_obj([r], dest=r, tag=3)
            comm.send_obj("last", dest=r)
    else:
        status = MPI.Status()
        assert comm.recv_obj(0, status=status) == {"to": comm.rank}
        assert (status.Get_source(), status.Get_tag()) == (0, comm.rank + 10)
        status = MPI.Status()
        assert comm.recv_obj(source=0, tag=3, status=status) == [comm.rank]
        assert (status.Get_source(), status.Get_tag()) == (0, 3)
        status = MPI.Status()
        assert comm.recv_obj(0, status) == "last"  # ChainerMN 7's positional order (source, status)
        assert (status.Get_source(), status.Get_tag()) == (0, 0)
    comm.mpi_comm.barrier()


# -- the debug-mode "diverged" check


def _model_with_grads(bad_rank=None):
    model = chainer.links.Linear(2, 3)
    model.W.grad = np.full((3, 2), 1.0 + comm_rank(), np.float32)
    model.b.grad = np.zeros(3, np.float32)
    if comm_rank() == bad_rank:
        model.b.grad[1] = np.nan
    return model


def comm_rank():
    return MPI.COMM_WORLD.rank


@pytest.mark.parametrize("name", ["naive", "flat", "two_dimensional"])
def test_non_finite_mean_raises_in_debug_mode_on_every_rank(name):
    comm = chainermn.create_communicator(name)
    bad = comm.size - 1
    with chainer.using_config("debug", True):
        with pytest.raises(ValueError, match=r".* diverged .*"):
            comm.multi_node_mean_grad(_model_with_grads(bad_rank=bad))
        model = _model_with_grads()  # finite: no error, the mean is right
        comm.multi_node_mean_grad(model)
        np.testing.assert_allclose(model.W.grad, np.full((3, 2), 1.0 + (comm.size - 1) / 2))
    model = _model_with_grads(bad_rank=bad)  # debug off: averaged, NaN and all, as ChainerMN
    comm.multi_node_mean_grad(model)
    assert np.isnan(model.b.grad[1]) and np.isfinite(model.b.grad[[0, 2]]).all()
    comm.finalize()


# -- MultiNodeBatchNormalization dtype


@pytest.mark.parametrize("dtype,param_dtype", [(np.float16, np.float16), (chainer.mixed16, np.float32)])
def test_mnbn_parameters_follow_the_config_dtype(comm, dtype, param_dtype):
    with chainer.using_config("dtype", dtype):
        bn = chainermn.links.MultiNodeBatchNormalization(3, comm)
        ref = chainer.links.BatchNormalization(3)
    for name in ("gamma", "beta"):
        assert getattr(bn, name).dtype == getattr(ref, name).dtype == param_dtype
    assert bn.avg_mean.dtype == bn.avg_var.dtype == ref.avg_mean.dtype
    # training forward in float16: output float16, normalized with the global batch's statistics
    rows = np.arange(4 * comm.size * 3, dtype=np.float32).reshape(-1, 3) % 7
    local = rows[comm.rank * 4 : (comm.rank + 1) * 4].astype(np.float16)
    with chainer.using_config("dtype", dtype):
        y = bn(local)
    assert y.dtype == np.float16
    mean, std = rows.mean(axis=0), np.sqrt(rows.var(axis=0) + bn.eps)
    np.testing.assert_allclose(
        y.array.astype(np.float32), (rows[comm.rank * 4 : (comm.rank + 1) * 4] - mean) / std, atol=2e-2
    )
    bn.finalize()


def test_mnbn_nccl_backend_without_nccl_raises_at_construction(comm):
    from mnframe import cuda_env

    info = cuda_env.probe()
    if info.problem is None and info.nccl_problem is None:
        pytest.skip("NCCL is usable here")
    with pytest.raises(ValueError, match="communication_backend='nccl' cannot be used here"):
        chainermn.links.MultiNodeBatchNormalization(1, comm, communication_backend="nccl")
    with pytest.raises(ValueError, match="communication_backend must be one of"):
        chainermn.links.MultiNodeBatchNormalization(1, comm, communication_backend="dummy")


# -- the multi-node iterator's element types


@pytest.mark.parametrize(
    "example", [pytest.param("test", id="str"), pytest.param((np.zeros(2), {"a": 1}), id="tuple-with-dict")]
)
def test_multi_node_iterator_rejects_non_numeric_examples_on_every_rank(comm, example):
    it = chainer.iterators.SerialIterator([example] * 4, batch_size=2, shuffle=True)
    mn = chainermn.iterators.create_multi_node_iterator(it, comm)
    with pytest.raises(TypeError, match="it sends arrays, numbers and tuples of them only"):
        mn.next()
    comm.mpi_comm.barrier()  # every rank raised at the same call: nobody is left in the broadcast


def test_multi_node_iterator_keeps_numeric_examples(comm):
    data = [(np.full(2, i, np.int8), i, np.float16(i), [np.uint8(i)]) for i in range(4)]
    it = chainer.iterators.SerialIterator(data, batch_size=4, shuffle=False)
    batch = chainermn.iterators.create_multi_node_iterator(it, comm).next()
    assert [int(b[1]) for b in batch] == [0, 1, 2, 3]
    assert batch[3][0].dtype == np.int8 and type(batch[3][2]) is np.float16 and batch[3][3][0].dtype == np.uint8
