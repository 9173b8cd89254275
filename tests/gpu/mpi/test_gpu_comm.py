"""Several ranks on GPUs: each name in MNFRAME_GPU_NAMES averages CuPy gradients.

Rank r's gradients are (r + 1) * base, with ``base`` drawn identically on every
rank, so the mean is (size + 1) / 2 * base, whatever the rank count.
"""

import os

import chainer
import chainer.links as L
import numpy as np
import pytest

import mnframe as chainermn

NAMES = [n for n in os.environ.get("MNFRAME_GPU_NAMES", "").split(",") if n]


def _model(cupy, dtype, rank):
    with chainer.using_config("dtype", np.dtype(dtype)):  # parameters (and so gradients) of ``dtype``
        model = chainer.Sequential(L.Linear(9, 7), L.Linear(7, 3))  # 9*7+7+7*3+3 = 94 elements: odd slices
    model.to_device(chainer.get_device(f"@cupy:{cupy.cuda.Device().id}"))
    rs = np.random.RandomState(5)
    base = {}
    for n, p in sorted(model.namedparams()):
        p.array[...] = cupy.asarray(rs.standard_normal(p.shape)).astype(dtype)
        b = rs.standard_normal(p.shape).astype(dtype)
        base[n] = b.astype(np.float64)
        p.grad = cupy.asarray(b * (rank + 1)).astype(dtype)
    return model, base


def _check(cupy, comm, model, base, tol, what):
    want = (comm.size + 1) / 2.0
    for n, p in sorted(model.namedparams()):
        assert isinstance(p.grad, cupy.ndarray) and p.grad.dtype == p.array.dtype, (what, n)
        np.testing.assert_allclose(
            cupy.asnumpy(p.grad).astype(np.float64), want * base[n], rtol=tol, atol=tol, err_msg=f"{what} {n}"
        )


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "dtype,wire",
    [(np.float32, None), (np.float32, np.float16), (np.float16, None), (np.float16, np.float32), (np.float64, None)],
)
@pytest.mark.parametrize("batched", [False, True])
def test_mean_of_rank_scaled_gradients(cupy, name, dtype, wire, batched):
    comm = chainermn.create_communicator(name, allreduce_grad_dtype=wire, batched_copy=batched)
    tol = 2e-2 if np.float16 in (dtype, wire) else 1e-5
    what = f"{name} {np.dtype(dtype).name} wire={wire} batched={batched}"
    if name == "dummy":  # no exchange: every rank keeps its own gradients
        model, base = _model(cupy, dtype, comm.rank)
        comm.multi_node_mean_grad(model)
        for n, p in sorted(model.namedparams()):
            np.testing.assert_allclose(cupy.asnumpy(p.grad), (comm.rank + 1) * base[n], rtol=tol, atol=tol)
        comm.finalize()
        return
    model, base = _model(cupy, dtype, comm.rank)
    comm.multi_node_mean_grad(model)
    _check(cupy, comm, model, base, tol, what)
    # a second step with fresh gradients (the buffer is reused; old views are replaced)
    model2, base2 = _model(cupy, dtype, comm.rank)
    for (_, p), (_, q) in zip(sorted(model.namedparams()), sorted(model2.namedparams())):
        p.grad = q.grad
    comm.multi_node_mean_grad(model)
    _check(cupy, comm, model, base2, tol, what + " step 2")
    comm.finalize()


@pytest.mark.parametrize("name", NAMES)
def test_missing_gradient_is_zero_filled(cupy, name):
    if name == "dummy":
        pytest.skip("dummy does not exchange")
    comm = chainermn.create_communicator(name)
    model, base = _model(cupy, np.float32, comm.rank)
    first = sorted(model.namedparams())[0][1]
    if comm.rank == 0:
        first.grad = None  # rank 0 contributes zeros for this parameter
    comm.multi_node_mean_grad(model, zero_fill=True)
    want = (comm.size * (comm.size + 1) / 2.0 - 1) / comm.size
    np.testing.assert_allclose(cupy.asnumpy(first.grad), want * base[sorted(base)[0]], rtol=1e-5, atol=1e-5)
    comm.finalize()


def test_bcast_data_on_gpu(cupy, names):
    comm = chainermn.create_communicator(names[0])
    model, _ = _model(cupy, np.float16, comm.rank)
    for _, p in sorted(model.namedparams()):
        p.array[...] = comm.rank
    comm.bcast_data(model)
    for _, p in sorted(model.namedparams()):
        assert p.array.dtype == np.float16 and float(cupy.abs(p.array).max()) == 0.0
    comm.finalize()
