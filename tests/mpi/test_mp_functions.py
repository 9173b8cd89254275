"""Differentiable communication functions: backward agrees with numerical
differentiation of a loss summed over all ranks, across 2 and 3 ranks.

Each check runs ``fn`` on every rank; the global loss is
``L = sum over ranks of sum_k <w_k, y_k>`` (``y_k`` the rank's outputs, ``w_k``
random weights). Backward on every rank must give dL/dx for that rank's
inputs; the numerical derivative perturbs one element of one rank's input at a
time while every rank reruns the forward pass and the losses are summed.
"""

import chainer
import chainer.functions as F
import numpy as np
import pytest

import mnframe
import mnframe.functions as mnf

MPI_SIZES = (2, 3)
MPI_TIMEOUT = 120


@pytest.fixture(scope="module")
def comm(mpi_comm):
    return mnframe.create_communicator("naive", mpi_comm=mpi_comm)


# -- the global gradient check -------------------------------------------------


def _as_tuple(ys):
    if ys is None:
        return ()
    return tuple(ys) if isinstance(ys, (tuple, list)) else (ys,)


def _weights(ys, rank, seed):
    rng = np.random.RandomState(seed + 1000 * rank)
    return [rng.uniform(-1, 1, y.shape).astype(y.dtype) for y in ys]


def _local_loss(ys, ws):
    return float(sum(np.sum(y.array.astype(np.float64) * w) for y, w in zip(ys, ws)))


def global_grad_check(comm, mpi_comm, fn, xs, seed=0, eps=1e-4, atol=1e-6, rtol=1e-5):
    """Compare backward of ``fn(comm, vars)`` with the numerical gradient of the global loss."""
    xs = [np.asarray(x, dtype=np.float64) for x in xs]
    variables = [chainer.Variable(x.copy()) for x in xs]
    ys = _as_tuple(fn(comm, variables))
    ws = _weights(ys, comm.rank, seed)
    if ys:
        chainer.backward(list(ys), [chainer.Variable(w) for w in ws])
    analytic = [np.zeros_like(x) if v.grad is None else v.grad for v, x in zip(variables, xs)]

    def loss(perturbed):
        with chainer.no_backprop_mode():
            out = _as_tuple(fn(comm, [chainer.Variable(p) for p in perturbed]))
        return mpi_comm.allreduce(_local_loss(out, ws))

    numeric = [np.zeros_like(x) for x in xs]
    layout = mpi_comm.allgather([x.size for x in xs])  # every rank loops over the same elements
    for owner, sizes in enumerate(layout):
        for i, n in enumerate(sizes):
            for e in range(n):
                values = []
                for sign in (1, -1):
                    p = [x.copy() for x in xs]
                    if owner == comm.rank:
                        p[i].reshape(-1)[e] += sign * eps
                    values.append(loss(p))
                if owner == comm.rank:
                    numeric[i].reshape(-1)[e] = (values[0] - values[1]) / (2 * eps)
    for i, (a, n) in enumerate(zip(analytic, numeric)):
        np.testing.assert_allclose(
            a, n, atol=atol, rtol=rtol, err_msg=f"rank {comm.rank} input {i}: backward != numerical"
        )


def _x(rank, shape, seed=0):
    return np.random.RandomState(seed + 17 * rank).uniform(-1, 1, shape)


# -- point to point ----------------------------------------------------------


def _pipeline_ring(comm, vs):
    """Rank 0 -> 1 -> ... -> last -> 0, tuples on the wire, a delegate closing the loop."""
    (x,) = vs
    r, n = comm.rank, comm.size
    if r == 0:
        phi = mnf.send((x * 2.0, F.sin(x)), comm, rank=1)
        back = mnf.recv(comm, rank=n - 1, delegate_variable=phi)
        return back * x
    a, b = mnf.recv(comm, rank=r - 1)
    out = (a * x + b, F.tanh(a))
    return mnf.send(out if r < n - 1 else out[0] * out[1], comm, rank=(r + 1) % n)


def test_send_recv_pipeline_grad(comm, mpi_comm):
    global_grad_check(comm, mpi_comm, _pipeline_ring, [_x(comm.rank, (2, 2))])


def _two_sends_pseudo_connect(comm, vs):
    """004: two sends in a row joined by pseudo_connect; the receiver uses both."""
    (x,) = vs
    if comm.rank == 0:
        phi1 = mnf.send(x * 2.0, comm, rank=1)
        phi2 = mnf.send(x * x, comm, rank=1)
        (psi,) = mnf.pseudo_connect(phi1, phi2)
        return psi
    if comm.rank == 1:
        z1 = mnf.recv(comm, rank=0)
        z2 = mnf.recv(comm, rank=0)
        return z1 * z2 + x
    return x * 3.0  # an idle rank with a local loss


def test_pseudo_connect_two_sends_grad(comm, mpi_comm):
    global_grad_check(comm, mpi_comm, _two_sends_pseudo_connect, [_x(comm.rank, (3,))])


def test_recv_shapes_dtypes_and_force_tuple(comm):
    """Each float dtype and a per-rank shape arrive intact; the delegate is empty."""
    for dtype in (np.float16, np.float32, np.float64):
        if comm.rank == 0:
            for dest in range(1, comm.size):
                x = np.arange(dest * 3, dtype=dtype).reshape(dest, 3)
                phi = mnf.send(chainer.Variable(x), comm, rank=dest, tag=5)
                assert phi.shape == (0,) and phi.name == "delegate_variable"
        else:
            y = mnf.recv(comm, rank=0, tag=5, force_tuple=True)
            assert isinstance(y, tuple) and len(y) == 1
            assert y[0].dtype == dtype and y[0].shape == (comm.rank, 3)
            np.testing.assert_array_equal(y[0].array, np.arange(comm.rank * 3).reshape(comm.rank, 3))


def test_send_recv_backward_keeps_dtype(comm):
    """Gradients come back in the variable's dtype (float16 included)."""
    for dtype in (np.float16, np.float32):
        if comm.rank == 0:
            x = chainer.Variable(np.ones((2, 2), dtype=dtype))
            phi = mnf.send(x, comm, rank=1)
            phi.backward()
            assert x.grad.dtype == dtype
            np.testing.assert_array_equal(x.grad, np.full((2, 2), 3, dtype=dtype))
        elif comm.rank == 1:
            y = mnf.recv(comm, rank=0)
            F.sum(y * 3).backward()


def test_send_to_self_is_rejected(comm):
    x = chainer.Variable(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="own rank"):
        mnf.send(x, comm, rank=comm.rank)
    with pytest.raises(ValueError, match="own rank"):
        mnf.recv(comm, rank=comm.rank)
    with pytest.raises(ValueError, match="outside the communicator"):
        mnf.send(x, comm, rank=comm.size)


# -- collectives -----------------------------------------------------------------


def _bcast(comm, vs):
    (x,) = vs
    root = comm.size - 1
    y = mnf.bcast(comm, x * x if comm.rank == root else None, root=root)
    return y * (comm.rank + 1.0) + x


def test_bcast_grad(comm, mpi_comm):
    global_grad_check(comm, mpi_comm, _bcast, [_x(comm.rank, (2, 2))])


def _gather(comm, vs):
    (x,) = vs
    ys = mnf.gather(comm, F.sin(x), root=0)
    if comm.rank == 0:
        assert len(ys) == comm.size
        return tuple(y * 2.0 for y in ys)
    return ys  # the delegate: backward from it scatters the gradient back


def test_gather_grad_different_shapes(comm, mpi_comm):
    global_grad_check(comm, mpi_comm, _gather, [_x(comm.rank, (comm.rank + 1, 1))])


def _scatter(comm, vs):
    root = 1
    if comm.rank == root:
        xs = [v * v for v in vs]
        y = mnf.scatter(comm, xs, root=root)
    else:
        y = mnf.scatter(comm, None, root=root)
    return y * 1.5


def test_scatter_grad_different_shapes(comm, mpi_comm):
    xs = [_x(comm.rank, (j + 1,), seed=j) for j in range(comm.size)]
    global_grad_check(comm, mpi_comm, _scatter, xs)


def _allgather(comm, vs):
    (x,) = vs
    ys = mnf.allgather(comm, x * (comm.rank + 1.0))
    assert len(ys) == comm.size
    return tuple(F.tanh(y) for y in ys)


def test_allgather_grad_different_shapes(comm, mpi_comm):
    global_grad_check(comm, mpi_comm, _allgather, [_x(comm.rank, (comm.rank + 1, 1))])


def _alltoall(comm, vs):
    ys = mnf.alltoall(comm, [v * (j + 1.0) for j, v in enumerate(vs)])
    return tuple(y * y for y in ys)


def test_alltoall_grad_different_shapes(comm, mpi_comm):
    xs = [_x(comm.rank, (1 + (comm.rank + j) % 2,), seed=j) for j in range(comm.size)]
    global_grad_check(comm, mpi_comm, _alltoall, xs)


def test_allgather_unused_output_counts_as_zero(comm):
    """An output the loss ignores still takes part in the backward collective."""
    x = chainer.Variable(np.full((2,), comm.rank + 1.0, np.float32))
    ys = mnf.allgather(comm, x)
    F.sum(ys[0]).backward()  # only rank 0's piece is used, on every rank
    expected = comm.size if comm.rank == 0 else 0
    np.testing.assert_array_equal(x.grad, np.full((2,), expected, np.float32))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_collectives_keep_dtype(comm, dtype):
    x = chainer.Variable(np.full((2,), comm.rank, dtype=dtype))
    ys = mnf.allgather(comm, x)
    assert all(y.dtype == dtype for y in ys)
    F.sum(F.stack(ys)).backward()
    assert x.grad.dtype == dtype
    np.testing.assert_array_equal(x.grad, np.full((2,), comm.size, dtype=dtype))
    y = mnf.bcast(comm, x if comm.rank == 0 else None)
    assert y.dtype == dtype


def test_collective_argument_errors_raise_everywhere(comm):
    """A wrong count on one rank raises on every rank instead of hanging."""
    xs = [chainer.Variable(np.zeros(1, np.float32)) for _ in range(comm.size)]
    with pytest.raises(ValueError):
        mnf.scatter(comm, xs[:-1] if comm.rank == 0 else None, root=0)
    with pytest.raises(ValueError):
        mnf.alltoall(comm, xs[:-1] if comm.rank == comm.size - 1 else xs)
    with pytest.raises(ValueError, match="root"):
        mnf.bcast(comm, xs[0], root=comm.size)


# -- split communicators -----------------------------------------------------------


def test_functions_on_split_communicator(comm):
    """A communicator from comm.split (reversed key order) works with every function."""
    sub = comm.split(comm.rank // 2, -comm.rank)
    assert sub.size == (2 if comm.rank < 2 else 1)
    # allgather and bcast on the sub-communicator (size 1 or 2)
    global_grad_check(sub, sub.mpi_comm, _allgather, [_x(comm.rank, (2,))])
    global_grad_check(sub, sub.mpi_comm, _bcast, [_x(comm.rank, (2,))])
    if sub.size == 2:
        # sub rank 0 is world rank 1: the ring runs backwards through the world
        assert sub.rank == 1 - comm.rank
        global_grad_check(sub, sub.mpi_comm, _pipeline_ring, [_x(comm.rank, (2,))])


def test_mismatched_backward_order_is_a_clear_error(comm):
    """Raw send/recv pairs whose backward runs in different orders on the two
    ranks are reported by the shape check instead of delivering the wrong
    gradients. Rank 0's first send sits deeper in its graph (so its backward
    runs first); rank 1 chains its second receive to the first (so that one's
    backward runs first)."""
    if comm.rank > 1:
        return
    tag = 77
    if comm.rank == 0:
        x = chainer.Variable(np.ones(2))
        w = chainer.Variable(np.ones(3))
        phi1 = mnf.send(F.sin(F.sin(x)), comm, rank=1, tag=tag)
        phi2 = mnf.send(w * 1.0, comm, rank=1, tag=tag)
        (psi,) = mnf.pseudo_connect(phi1, phi2)
        with pytest.raises(RuntimeError, match=r"expected an array of shape \(2,\) but received shape \(3,\)"):
            psi.backward()
        comm.recv(1, tag)  # drain the other gradient message
    else:
        z1 = mnf.recv(comm, rank=0, tag=tag)
        z2 = mnf.recv(comm, rank=0, tag=tag, delegate_variable=z1)
        (F.sum(z1) + F.sum(z2)).backward()
