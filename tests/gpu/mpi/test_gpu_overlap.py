"""create_multi_node_optimizer(overlap=True) on CuPy gradients (each name in MNFRAME_GPU_NAMES):
the buckets averaged during backward give bitwise the parameters of averaging after backward,
on every rank, and (to rounding) those of the same steps on NumPy through the CPU.

The CPU tests are tests/mpi/test_opt_overlap.py; run by tests/gpu/test_gpu_mpi.py."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
import pytest

import mnframe as chainermn


class Net(chainer.Chain):
    """Layers of several sizes, a weight used twice, a parameter that backward never reaches."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(12, 160)
            self.l2 = L.Linear(160, 128)
            self.shared = L.Linear(128, 128)
            self.out = L.Linear(128, 5)
            self.unused = L.Linear(3, 3)

    def forward(self, x, t):
        h = F.relu(self.l1(x))
        h = F.relu(self.l2(h))
        h = F.tanh(self.shared(F.tanh(self.shared(h))))
        return F.softmax_cross_entropy(self.out(h), t)


def _train(comm, device, overlap, steps=4, **kw):
    """{name: NumPy copy of the parameter}, and the overlap's stats, after ``steps`` updates."""
    model = Net()
    rng = np.random.RandomState(0)
    for _, p in sorted(model.namedparams()):
        p.array[...] = rng.standard_normal(p.shape).astype(p.dtype) * 0.1
    dev = chainer.get_device(device)
    model.to_device(dev)
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.MomentumSGD(lr=0.1), comm, overlap=overlap, **kw)
    opt.setup(model)
    data = np.random.RandomState(10 + comm.rank)
    for _ in range(steps):
        x = data.standard_normal((8, 12)).astype(np.float32)
        t = data.randint(0, 5, 8).astype(np.int32)
        opt.update(model, dev.send(x), dev.send(t))
    stats = dict(opt._overlap.stats) if overlap else {}
    opt.finalize()
    cpu = chainer.backend.CpuDevice()
    return {n: cpu.send(p.array) for n, p in sorted(model.namedparams())}, stats


@pytest.mark.parametrize("cap", [0.01, 25])  # many small buckets, or one
def test_bitwise_equal_to_averaging_after_backward(cupy, names, cap):
    gpu = f"@cupy:{cupy.cuda.Device().id}"
    cpu_comm = chainermn.create_communicator("two_dimensional")
    cpu, _ = _train(cpu_comm, "@numpy", overlap=False)
    cpu_comm.finalize()
    for name in [n for n in names if n != "dummy"]:
        comm = chainermn.create_communicator(name)
        plain, _ = _train(comm, gpu, overlap=False)
        over, stats = _train(comm, gpu, overlap=True, bucket_cap_mb=cap)
        for n in plain:
            assert over[n].tobytes() == plain[n].tobytes(), f"{name}, cap {cap}: {n}"
            np.testing.assert_allclose(over[n], cpu[n], rtol=1e-4, atol=1e-5, err_msg=f"{name}: {n} against the CPU")
        if cap < 1:  # update 2 records the order; 3 and 4 average buckets during backward
            assert stats["buckets"] > 3 and stats["started_in_backward"] >= stats["buckets"] - 2, (name, stats)
        digest = float(sum(np.abs(a).sum() for a in over.values()))
        assert len(set(comm.allgather_obj(digest))) == 1, f"{name}: the ranks' models differ"
        comm.finalize()
