"""compression='powersgd': every rank ends with bitwise the same gradients, equal (to rounding) to
a NumPy reference of the same PowerSGD math on the ranks' mean; every CPU communicator, float32 and
float16 wire; overlap buckets; an exact resume from the optimizer's serialized state."""

import io

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
import pytest

import mnframe as chainermn
from mnframe.communicators import powersgd, registry

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 240

NAMES = [n for n in registry.cpu_names() if n != "dummy"]
RANK = 2
START = 1  # one uncompressed average, then compressed
STEPS = 4


def make_model():
    """A compressible matrix, a 4-D kernel seen as 6 x 27, a matrix too thin to compress, vectors."""
    m = chainer.Chain()
    with m.init_scope():
        m.big = L.Linear(24, 16)  # W 16 x 24: compressed
        m.conv = L.Convolution2D(3, 6, 3)  # W 6 x 3 x 3 x 3 -> 6 x 27: compressed
        m.thin = L.Linear(16, 2)  # W 2 x 16: min side 2 = rank, not compressed
    return m


def grad_of(shape, index, step, rank):
    """This rank's gradient: a function of (parameter, step) plus rank times another."""
    a = np.random.RandomState(1000 * step + index).standard_normal(shape)
    b = np.random.RandomState(5000 + 1000 * step + index).standard_normal(shape)
    return (a + rank * 0.3 * b).astype(np.float32)


def mean_grad(shape, index, step, size):
    return np.mean([grad_of(shape, index, step, r).astype(np.float64) for r in range(size)], axis=0)


def orth(p):
    """Orthonormal columns by QR (signs as Gram-Schmidt: R's diagonal positive)."""
    q, r = np.linalg.qr(p)
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)


class Reference:
    """PowerSGD on the mean gradient, in float64: the error feedback's mean evolves as
    ``mean(M) - P Q^T``, so the averaged gradients only depend on the mean."""

    def __init__(self):
        self.error, self.q, self.steps = {}, {}, {}

    def step(self, name, g):
        self.steps[name] = self.steps.get(name, 0) + 1
        if self.steps[name] <= START or not powersgd.compressible(g.shape, RANK):
            return g
        n, m = powersgd.matrix_shape(g.shape)
        mat = g.reshape(n, m) + self.error.get(name, 0.0)
        q = self.q.get(name)
        q = powersgd.initial_q(name, m, RANK, np.float32, np).astype(np.float64) if q is None else orth(q)
        p = orth(mat @ q)
        q = mat.T @ p
        approx = p @ q.T
        self.error[name], self.q[name] = mat - approx, q
        return approx.reshape(g.shape)


def run_steps(comm, model, steps=STEPS):
    """Average ``steps`` rounds of known gradients; return each round's averaged gradients."""
    out = []
    for step in range(steps):
        for i, (_, p) in enumerate(sorted(model.namedparams())):
            p.grad = grad_of(p.shape, i, step, comm.rank)
        comm.multi_node_mean_grad(model)
        out.append({n: p.grad.copy() for n, p in sorted(model.namedparams())})
    return out


@pytest.fixture(scope="module", params=NAMES)
def name(request):
    return request.param


@pytest.mark.parametrize("wire", [None, "float16"], ids=["own", "f16"])
def test_bitwise_equal_on_every_rank_and_equal_to_the_reference(name, wire):
    comm = chainermn.create_communicator(
        name, allreduce_grad_dtype=wire, compression="powersgd", powersgd_rank=RANK, powersgd_start_iter=START
    )
    model = make_model()
    got = run_steps(comm, model)
    # bitwise the same on every rank
    mine = np.concatenate([g.ravel() for step in got for g in step.values()])
    for other in comm.mpi_comm.allgather(mine):
        assert other.tobytes() == mine.tobytes()
    # the reference on the mean
    ref = Reference()
    tol = 2e-2 if wire == "float16" and comm.size > 1 else 1e-4
    for step, grads in enumerate(got):
        for i, (n, g) in enumerate(grads.items()):
            want = ref.step(n, mean_grad(g.shape, i, step, comm.size))
            scale = np.abs(want).max()
            np.testing.assert_allclose(g, want, rtol=0, atol=tol * scale, err_msg=f"{n} step {step}")
            if step >= START and powersgd.compressible(g.shape, RANK):
                assert np.linalg.matrix_rank(g.reshape(g.shape[0], -1).astype(np.float64), tol=1e-3 * scale) <= RANK
    # the elements handed to the allreduce: P and Q of the compressed, the rest whole
    shapes = [p.shape for _, p in model.namedparams()]
    sent, full = powersgd.wire_elements(shapes, RANK)
    assert comm.powersgd.last["elements"] == sent < full == comm.powersgd.last["uncompressed_elements"]
    assert comm.powersgd.last["bytes"] == sent * (2 if wire == "float16" else 4)
    comm.finalize()


def test_off_by_default_and_exact():
    comm = chainermn.create_communicator("flat")
    assert comm.get_config("compression") is None
    assert comm.get_config("powersgd_rank") == powersgd.DEFAULT_RANK
    got = run_steps(comm, make_model(), steps=1)[0]
    for i, (n, g) in enumerate(got.items()):
        np.testing.assert_allclose(g, mean_grad(g.shape, i, 0, comm.size), rtol=1e-6, atol=1e-6, err_msg=n)
    assert comm.powersgd.stats["steps"] == 0
    comm.finalize()


class Net(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(12, 64)
            self.l2 = L.Linear(64, 48)
            self.out = L.Linear(48, 5)

    def forward(self, x, t):
        return F.softmax_cross_entropy(self.out(F.relu(self.l2(F.relu(self.l1(x))))), t)


def _setup(comm, overlap=False, **kw):
    model = Net()
    rng = np.random.RandomState(0)
    for _, p in sorted(model.namedparams()):
        p.array[...] = rng.standard_normal(p.shape).astype(p.dtype) * 0.1
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm, overlap=overlap, **kw)
    opt.setup(model)
    return model, opt


def _train(comm, model, opt, first, last):
    for step in range(first, last):
        data = np.random.RandomState(100 * step + comm.rank)
        opt.update(model, data.standard_normal((8, 12)).astype(np.float32), data.randint(0, 5, 8).astype(np.int32))


def _compressed_comm(name="flat", wire=None):
    return chainermn.create_communicator(
        name, allreduce_grad_dtype=wire, compression="powersgd", powersgd_rank=RANK, powersgd_start_iter=2
    )


def _params(model):
    return b"".join(p.array.tobytes() for _, p in sorted(model.namedparams()))


@pytest.mark.parametrize("cap", [0.001, 25])
def test_overlap_buckets_bitwise_as_after_backward(name, cap):
    comm = _compressed_comm(name)
    plain, opt = _setup(comm)
    _train(comm, plain, opt, 0, 7)
    opt.finalize()
    comm2 = _compressed_comm(name)
    over, opt2 = _setup(comm2, overlap=True, bucket_cap_mb=cap)
    _train(comm2, over, opt2, 0, 7)
    if cap < 1:
        assert opt2._overlap.stats["buckets"] > 1
    opt2.finalize()
    assert _params(plain) == _params(over)
    assert comm.powersgd.stats["bytes"] < comm.powersgd.stats["steps"] * 4 * sum(p.size for p in plain.params())
    for other in comm.mpi_comm.allgather(_params(plain)):
        assert other == _params(plain)
    comm.finalize()
    comm2.finalize()


def test_overlap_with_float16_wire():
    """The CPU default communicator, buckets and a float16 wire together: bitwise as after backward,
    the same on every rank, and (two warm-up steps included) under half the bytes of float16 whole."""
    runs = []
    for overlap in (False, True):
        comm = _compressed_comm("two_dimensional", wire="float16")
        model, opt = _setup(comm, overlap=overlap, **({"bucket_cap_mb": 0.001} if overlap else {}))
        _train(comm, model, opt, 0, 7)
        opt.finalize()
        runs.append((_params(model), dict(comm.powersgd.stats)))
        for other in comm.mpi_comm.allgather(_params(model)):
            assert other == _params(model)
        comm.finalize()
    assert runs[0][0] == runs[1][0]
    stats = runs[0][1]
    assert stats["steps"] == 6  # the first update only broadcasts
    assert stats["bytes"] < stats["uncompressed_bytes"] / 2


def test_resume_from_serialized_state_is_exact():
    """k steps, save model and optimizer (npz), a fresh model/optimizer/communicator loads them and
    continues: bitwise the uninterrupted run (error feedback and Q included)."""
    comm = _compressed_comm()
    whole, opt = _setup(comm)
    _train(comm, whole, opt, 0, 8)
    opt.finalize()
    comm.finalize()

    comm = _compressed_comm()
    first, opt = _setup(comm)
    _train(comm, first, opt, 0, 5)
    files = {}
    for key, obj in (("model", first), ("opt", opt)):
        files[key] = io.BytesIO()
        chainer.serializers.save_npz(files[key], obj)
    assert any("mnframe_powersgd" in k for k in np.load(io.BytesIO(files["opt"].getvalue())).files)
    opt.finalize()
    comm.finalize()

    comm = _compressed_comm()
    resumed, opt = _setup(comm)
    for key, obj in (("opt", opt), ("model", resumed)):  # the runner's order: the optimizer first
        files[key].seek(0)
        chainer.serializers.load_npz(files[key], obj)
    _train(comm, resumed, opt, 5, 8)
    assert _params(resumed) == _params(whole)
    opt.finalize()
    comm.finalize()


def test_refused_with_double_buffering_and_model_parallel_links():
    comm = _compressed_comm()
    with pytest.raises(ValueError, match="double_buffering=True is not supported"):
        chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(), comm, double_buffering=True)
    chain = chainermn.MultiNodeChainList(comm)
    chain.add_link(L.Linear(3, 3))
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.SGD(), comm)
    with pytest.raises(ValueError, match="model-parallel links"):
        opt.setup(chain)
    comm.finalize()
