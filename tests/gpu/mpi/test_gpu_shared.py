"""Two ranks on one GPU (run with CUDA_VISIBLE_DEVICES=0): each part does the sensible thing.

* ``create_communicator()`` picks non_cuda_aware (NCCL refuses shared GPUs) and
  that averages correctly;
* pure_nccl, asked for by name, fails with the same clear error on every rank
  (no hang) at its first exchange;
* the runner's device plan refuses pure_nccl before training and lets
  non_cuda_aware share GPU 0;
* MultiNodeBatchNormalization 'auto' falls back to MPI and matches the
  statistics of the global batch.
"""

import chainer
import chainer.links as L
import numpy as np
import pytest

import mnframe as chainermn
from mnframe.builder import placement
from mnframe.runtime.errors import ConfigError


def _grads(cupy, comm):
    model = L.Linear(5, 3)
    model.to_device(f"@cupy:{cupy.cuda.Device().id}")
    rs = np.random.RandomState(1)
    base = {n: rs.standard_normal(p.shape).astype(np.float32) for n, p in sorted(model.namedparams())}
    for n, p in sorted(model.namedparams()):
        p.grad = cupy.asarray(base[n] * (comm.rank + 1))
    return model, base


def test_default_is_non_cuda_aware_and_averages(cupy):
    comm = chainermn.create_communicator()
    assert type(comm).__name__ == "NonCudaAwareCommunicator"
    model, base = _grads(cupy, comm)
    comm.multi_node_mean_grad(model)
    for n, p in sorted(model.namedparams()):
        np.testing.assert_allclose(cupy.asnumpy(p.grad), base[n] * (comm.size + 1) / 2, rtol=1e-6, err_msg=n)
    comm.finalize()


def test_pure_nccl_fails_clearly_on_every_rank(cupy):
    comm = chainermn.create_communicator("pure_nccl")
    model, _ = _grads(cupy, comm)
    with pytest.raises(RuntimeError, match="NCCL needs one GPU per rank"):
        comm.multi_node_mean_grad(model)
    comm.finalize()


def test_runner_device_plan(cupy):
    n = cupy.cuda.runtime.getDeviceCount()
    comm = chainermn.create_communicator("pure_nccl")
    with pytest.raises(ConfigError, match="communicator=non_cuda_aware"):
        placement.gpu_plan(comm, n)
    comm.finalize()
    comm = chainermn.create_communicator("non_cuda_aware")
    assert placement.gpu_plan(comm, n)[0] == 0
    comm.finalize()


def test_mnbn_auto_falls_back_to_mpi(cupy):
    comm = chainermn.create_communicator("non_cuda_aware")
    link = chainermn.links.MultiNodeBatchNormalization(3, comm)
    link.to_device(f"@cupy:{cupy.cuda.Device().id}")
    rs = np.random.RandomState(4)
    xs = [rs.standard_normal((4, 3)).astype(np.float32) for _ in range(comm.size)]
    with chainer.using_config("train", True):
        y = link(cupy.asarray(xs[comm.rank]))
    assert link._exchange.name == "mpi"
    whole = np.concatenate(xs)
    want = (xs[comm.rank] - whole.mean(0)) / np.sqrt(whole.var(0) + link.eps)
    np.testing.assert_allclose(cupy.asnumpy(y.array), want, rtol=1e-4, atol=1e-4)
    link.finalize()
    comm.finalize()
