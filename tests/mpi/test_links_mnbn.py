"""MultiNodeBatchNormalization, create_mnbn_model and AllreducePersistent under MPI.

Every rank builds all ranks' batches from one seed, runs its own slice through
the multi-node link and compares with one process's BatchNormalization over
the concatenated batch.
"""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
import pytest

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 120

TOL = {
    np.float16: dict(rtol=2e-2, atol=3e-2),
    np.float32: dict(rtol=1e-4, atol=1e-4),
    np.float64: dict(rtol=1e-9, atol=1e-9),
}


@pytest.fixture(scope="module")
def comm(mpi_comm):
    try:
        import mnframe

        return mnframe.create_communicator("naive", mpi_comm=mpi_comm)
    except (ImportError, AttributeError, NotImplementedError):
        return mpi_comm  # communicators not there yet: the links accept an mpi4py comm


def _batches(sizes, shape, dtype, seed, loc=5.0, scale=3.0):
    rng = np.random.RandomState(seed)
    xs = [(rng.randn(n, *shape) * scale + loc).astype(dtype) for n in sizes]
    gys = [rng.randn(n, *shape).astype(dtype) for n in sizes]
    return xs, gys


def _sum_over_ranks(mpi_comm, a):
    return mpi_comm.allreduce(np.asarray(a, dtype=np.float64))


def _check_against_single(comm, mpi_comm, sizes, shape, dtype, steps=2, **bn_kwargs):
    from mnframe.links import MultiNodeBatchNormalization

    rank = mpi_comm.rank
    channels = shape[0]
    ref = L.BatchNormalization(channels, dtype=dtype, **bn_kwargs)
    mnbn = MultiNodeBatchNormalization(channels, comm, dtype=dtype, **bn_kwargs)
    lo = sum(sizes[:rank])
    hi = lo + sizes[rank]
    tol = TOL[dtype]
    for step in range(steps):
        xs, gys = _batches(sizes, shape, dtype, seed=step)
        x_all = chainer.Variable(np.concatenate(xs))
        y_all = ref(x_all)
        y_all.grad = np.concatenate(gys)
        ref.cleargrads()
        y_all.backward()

        x = chainer.Variable(xs[rank])
        y = mnbn(x)
        y.grad = gys[rank]
        mnbn.cleargrads()
        y.backward()

        assert y.dtype == dtype and x.grad.dtype == dtype
        np.testing.assert_allclose(y.array, y_all.array[lo:hi], **tol)
        np.testing.assert_allclose(x.grad, x_all.grad[lo:hi], **tol)
        for name in ("gamma", "beta"):
            mine = getattr(mnbn, name)
            if mine is None:
                continue
            # Parameter gradients are local shares: their sum is the single-process gradient.
            np.testing.assert_allclose(_sum_over_ranks(mpi_comm, mine.grad), getattr(ref, name).grad, **tol)
        np.testing.assert_allclose(mnbn.avg_mean, ref.avg_mean, **tol)
        np.testing.assert_allclose(mnbn.avg_var, ref.avg_var, **tol)
    return mnbn, ref


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_matches_single_process_unequal_batches(comm, mpi_comm, dtype):
    sizes = [2 + r for r in range(mpi_comm.size)]  # a different batch size on each rank
    _check_against_single(comm, mpi_comm, sizes, (3, 2, 2), dtype)


def test_matches_with_an_empty_rank_and_no_gamma_beta(comm, mpi_comm):
    sizes = [0] + [4] * (mpi_comm.size - 1) if mpi_comm.size > 1 else [5]
    _check_against_single(comm, mpi_comm, sizes, (4,), np.float32, use_gamma=False, use_beta=False)


def test_variance_is_stable_for_large_offsets(comm, mpi_comm):
    # E[x^2]-E[x]^2 loses everything here in float32; Chan's merge does not.
    from mnframe.links import MultiNodeBatchNormalization

    sizes = [3 + r for r in range(mpi_comm.size)]
    xs, _ = _batches(sizes, (2,), np.float32, seed=7, loc=1e4, scale=1.0)
    mnbn = MultiNodeBatchNormalization(2, comm, decay=0.0)
    mnbn(xs[mpi_comm.rank])
    expected = np.concatenate(xs).astype(np.float64).var(axis=0, ddof=1)
    np.testing.assert_allclose(mnbn.avg_var, expected, rtol=1e-3)


def test_test_mode_uses_running_stats_without_communication(comm, mpi_comm):
    from mnframe.links import MultiNodeBatchNormalization

    mnbn = MultiNodeBatchNormalization(3, comm)
    mnbn.avg_mean[:] = 1.0
    mnbn.avg_var[:] = 4.0
    x = np.full((2 + mpi_comm.rank, 3), 3.0, dtype=np.float32)  # differing calls are fine
    with chainer.using_config("train", False):
        y = mnbn(x)
    np.testing.assert_allclose(y.array, (3.0 - 1.0) / np.sqrt(4.0 + 2e-5), rtol=1e-5)


class _Net(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(3, 4)
            self.bn1 = L.BatchNormalization(4)
            self.seq = chainer.Sequential(L.Linear(4, 2), F.relu, L.BatchNormalization(2))

    def forward(self, x):
        return self.seq(self.bn1(self.l1(x)))


def test_create_mnbn_model_matches_single_process(comm, mpi_comm):
    from mnframe.links import MultiNodeBatchNormalization, create_mnbn_model

    rank, size = mpi_comm.rank, mpi_comm.size
    np.random.seed(0)
    ref = _Net()
    ref.bn1.avg_mean[:] = 0.5  # non-default state must be carried over
    model = create_mnbn_model(ref, comm)
    assert isinstance(model.bn1, MultiNodeBatchNormalization)
    assert isinstance(model.seq[2], MultiNodeBatchNormalization)
    assert type(ref.bn1) is L.BatchNormalization  # the original is untouched
    np.testing.assert_array_equal(model.bn1.avg_mean, ref.bn1.avg_mean)
    np.testing.assert_array_equal(model.l1.W.array, ref.l1.W.array)
    assert sorted(n for n, _ in model.namedparams()) == sorted(n for n, _ in ref.namedparams())

    sizes = [2 + r for r in range(size)]
    xs, _ = _batches(sizes, (3,), np.float32, seed=3)
    lo = sum(sizes[:rank])
    y_ref = ref(np.concatenate(xs))
    F.sum(y_ref**2).backward()
    y = model(xs[rank])
    F.sum(y**2).backward()
    np.testing.assert_allclose(y.array, y_ref.array[lo : lo + sizes[rank]], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(model.bn1.avg_mean, ref.bn1.avg_mean, rtol=1e-5)
    for (name, p), (_, q) in zip(sorted(model.namedparams()), sorted(ref.namedparams())):
        np.testing.assert_allclose(_sum_over_ranks(mpi_comm, p.grad), q.grad, rtol=1e-4, atol=1e-5, err_msg=name)


def test_allreduce_persistent_averages_floats_only(comm, mpi_comm):
    from mnframe.extensions import AllreducePersistent

    rank, size = mpi_comm.rank, mpi_comm.size
    model = chainer.Sequential(L.BatchNormalization(3))
    bn = model[0]
    bn.avg_mean[:] = rank
    bn.avg_var[:] = 2.0 * rank + 1
    bn.N = rank + 10  # integer: left alone
    AllreducePersistent(model, comm)()
    mean_rank = (size - 1) / 2.0
    np.testing.assert_allclose(bn.avg_mean, mean_rank)
    np.testing.assert_allclose(bn.avg_var, 2.0 * mean_rank + 1)
    assert bn.avg_mean.dtype == np.float32
    assert bn.N == rank + 10


def test_finetune_accumulates_global_population_statistics(comm, mpi_comm):
    from mnframe.links import MultiNodeBatchNormalization

    rank, size = mpi_comm.rank, mpi_comm.size
    ref = L.BatchNormalization(2)
    mnbn = MultiNodeBatchNormalization(2, comm)
    sizes = [3 + r for r in range(size)]
    for step in range(3):
        xs, _ = _batches(sizes, (2,), np.float32, seed=10 + step)
        ref(np.concatenate(xs), finetune=True)
        mnbn(xs[rank], finetune=True)
    assert mnbn.N == ref.N == 3
    np.testing.assert_allclose(mnbn.avg_mean, ref.avg_mean, rtol=1e-5)
    np.testing.assert_allclose(mnbn.avg_var, ref.avg_var, rtol=1e-4)
