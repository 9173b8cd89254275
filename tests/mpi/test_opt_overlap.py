"""create_multi_node_optimizer(overlap=True): buckets averaged during backward, bitwise the average after it."""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
import pytest

import mnframe as chainermn
from mnframe.communicators import registry
from mnframe.optimizers import overlap as overlap_module

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 180

NAMES = [n for n in registry.cpu_names() if n != "dummy"]


class Net(chainer.Chain):
    """Layers of several sizes (one above two_dimensional's in-place threshold), a weight used twice,
    and a parameter that backward never reaches (zero_fill)."""

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


def _train(comm, overlap, steps=4, **kw):
    model = Net()
    rng = np.random.RandomState(0)
    for _, p in sorted(model.namedparams()):
        p.array[...] = rng.standard_normal(p.shape).astype(p.dtype) * 0.1
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.MomentumSGD(lr=0.1), comm, overlap=overlap, **kw)
    opt.setup(model)
    data = np.random.RandomState(10 + comm.rank)
    stats = []
    for _ in range(steps):
        x = data.standard_normal((8, 12)).astype(np.float32)
        t = data.randint(0, 5, 8).astype(np.int32)
        opt.update(model, x, t)
        if overlap:
            stats.append(dict(opt._overlap.stats))
    opt.finalize()
    return model, stats, opt.t


@pytest.fixture(scope="module", params=NAMES)
def comm(request):
    c = chainermn.create_communicator(request.param)
    yield c
    c.finalize()


@pytest.mark.parametrize("cap", [0.01, 25])
def test_bitwise_equal_to_averaging_after_backward(comm, cap):
    plain, _, t0 = _train(comm, overlap=False)
    over, stats, t1 = _train(comm, overlap=True, bucket_cap_mb=cap)
    assert t0 == t1 == 3  # the first update only broadcasts (ChainerMN), the others step
    for (name, a), (_, b) in zip(sorted(plain.namedparams()), sorted(over.namedparams())):
        assert a.array.tobytes() == b.array.tobytes(), name
    assert over.unused.W.array.tobytes() == plain.unused.W.array.tobytes()
    # update 2 averages after backward (it records the order), updates 3 and 4 during backward
    if cap < 1:
        assert stats[-1]["buckets"] > 3
        assert stats[-1]["started_in_backward"] >= stats[-1]["buckets"] - 2
    else:
        assert stats[-1]["buckets"] == 1
    # the ranks trained the same model
    digest = float(sum(np.abs(p.array).sum() for p in over.params()))
    assert len(set(comm.allgather_obj(digest))) == 1


def test_the_first_bucket_has_its_own_cap(comm, monkeypatch):
    """DDP's first-bucket rule: the last layers' gradients go first, in a bucket of their own."""
    monkeypatch.setattr(overlap_module, "FIRST_BUCKET_CAP_MB", 2000 / (1 << 20))  # out/W alone (2560 bytes)
    plain, _, _ = _train(comm, overlap=False)
    over, stats, _ = _train(comm, overlap=True, bucket_cap_mb=25)  # one bucket for the rest
    assert stats[-1]["buckets"] == 2 and stats[-1]["started_in_backward"] == 1
    for (name, a), (_, b) in zip(sorted(plain.namedparams()), sorted(over.namedparams())):
        assert a.array.tobytes() == b.array.tobytes(), name


def test_a_steady_step_reuses_every_buckets_buffer(comm):
    """The bucket communicator keeps one buffer per bucket: a later step allocates none (shared
    windows are collective and slow; they were reallocated every call with more than 2 buckets)."""
    model = Net()
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(), comm, overlap=True, bucket_cap_mb=0.01)
    opt.setup(model)
    data = np.random.RandomState(comm.rank)
    x, t = data.standard_normal((8, 12)).astype(np.float32), data.randint(0, 5, 8).astype(np.int32)
    kept = []
    for _ in range(5):
        opt.update(model, x, t)
        reducers = getattr(opt._overlap._comm, "_reducers", {}).values()  # made at the first planned step
        kept.append({id(b) for r in reducers for b in getattr(r, "_buffers", {}).values()})
    assert opt._overlap.stats["buckets"] > 4
    assert kept[-1] == kept[-2] == kept[-3]
    opt.finalize()


def test_float16_wire_bitwise():
    comm = chainermn.create_communicator("two_dimensional", allreduce_grad_dtype="float16")
    plain, _, _ = _train(comm, overlap=False, steps=3)
    over, _, _ = _train(comm, overlap=True, steps=3, bucket_cap_mb=0.02)
    for (name, a), (_, b) in zip(sorted(plain.namedparams()), sorted(over.namedparams())):
        assert a.array.tobytes() == b.array.tobytes(), name
    comm.finalize()


def test_refuses_double_buffering_too():
    comm = chainermn.create_communicator("naive")
    with pytest.raises(ValueError, match="pick one"):
        chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(), comm, overlap=True, double_buffering=True)
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(), comm, overlap=True, bucket_cap_mb=0)
    comm.finalize()
