"""A short data-parallel training run on GPUs matches the same run on CPUs.

In one MPI job every rank trains the same model twice from the same seed on
its shard of the same data: once on the CPU with two_dimensional, once on its
GPU with the communicator in MNFRAME_GPU_NAMES (plain and double-buffered). Each
rank trains on its own shard, so the gradients differ between ranks and only a
correct cross-rank mean gives the CPU's parameters (with
MNFRAME_FAKE_NODE_SIZE=1, hierarchical/two_dimensional average through NCCL
in one-rank nodes and MPI between them, on a single GPU).
"""

import os

import chainer
import chainer.links as L
import numpy as np

import mnframe as chainermn

NAME = os.environ.get("MNFRAME_GPU_NAMES", "non_cuda_aware").split(",")[0]


def _train(device, name, double_buffering=False, steps=6):
    from mpi4py import MPI

    rank, size = MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size
    np.random.seed(0)
    rs = np.random.RandomState(0)
    x = rs.standard_normal((16 * size, 10)).astype(np.float32)
    t = rs.randint(0, 4, size=16 * size).astype(np.int32)
    model = L.Classifier(chainer.Sequential(L.Linear(10, 32), chainer.functions.relu, L.Linear(32, 4)))
    model.to_device(device)
    comm = chainermn.create_communicator(name)
    opt = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(lr=0.05), comm, double_buffering=double_buffering
    )
    opt.setup(model)
    dev = chainer.get_device(device)
    mine = slice(rank * 16, (rank + 1) * 16)
    for i in range(steps):
        xb, tb = x[mine][i % 2 * 8 : (i % 2 + 1) * 8], t[mine][i % 2 * 8 : (i % 2 + 1) * 8]
        opt.update(model, dev.send(xb), dev.send(tb))
    opt.wait()
    opt.finalize()
    comm.finalize()
    return {n: chainer.backend.CpuDevice().send(p.array) for n, p in sorted(model.namedparams())}


def test_gpu_training_matches_cpu(cupy):
    gpu_device = f"@cupy:{cupy.cuda.Device().id}"
    cpu = _train("@numpy", "two_dimensional")
    gpu = _train(gpu_device, NAME)
    for n in cpu:
        np.testing.assert_allclose(gpu[n], cpu[n], rtol=1e-4, atol=1e-5, err_msg=f"{NAME}: {n}")


def test_double_buffered_gpu_training_matches_cpu(cupy):
    gpu_device = f"@cupy:{cupy.cuda.Device().id}"
    cpu = _train("@numpy", "two_dimensional", double_buffering=True)
    gpu = _train(gpu_device, NAME, double_buffering=True)
    for n in cpu:
        np.testing.assert_allclose(gpu[n], cpu[n], rtol=1e-4, atol=1e-5, err_msg=f"{NAME} double buffered: {n}")
