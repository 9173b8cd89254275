"""multi_node_mean_grad / bcast_data on every CPU communicator name, under mpiexec."""

import chainer
import chainer.links as L
import numpy as np
import pytest

import mnframe as chainermn
from mnframe.communicators import registry
from mnframe.communicators.verdict import CommunicatorArgumentError

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 120

NAMES = [n for n in registry.cpu_names() if n != "dummy"]


def make_model(dtype_b=np.float32):
    m = chainer.Chain()
    with m.init_scope():
        m.a = L.Linear(3, 4)
        m.b = L.Linear(4, 2)
    m.b.W.array = m.b.W.array.astype(dtype_b)
    m.b.b.array = m.b.b.array.astype(dtype_b)
    return m


def fill(model, rank):
    for i, (_, p) in enumerate(sorted(model.namedparams())):
        p.grad = (np.arange(p.size).reshape(p.shape) % 7 + i + rank).astype(p.dtype)


def expected(p, i, size):
    return (np.arange(p.size).reshape(p.shape) % 7 + i + (size - 1) / 2).astype(np.float64)


def check_mean(model, size, rtol=1e-6):
    for i, (name, p) in enumerate(sorted(model.namedparams())):
        np.testing.assert_allclose(p.grad.astype(np.float64), expected(p, i, size), rtol=rtol, atol=rtol, err_msg=name)


@pytest.fixture(scope="module", params=NAMES)
def comm(request):
    c = chainermn.create_communicator(request.param)
    yield c
    c.finalize()


@pytest.mark.parametrize("dtype_b", [np.float32, np.float16], ids=["f32", "mixed16"])
def test_mean(comm, dtype_b):
    m = make_model(dtype_b)
    fill(m, comm.rank)
    comm.multi_node_mean_grad(m)
    check_mean(m, comm.size, rtol=1e-3 if dtype_b == np.float16 else 1e-6)
    for _, p in m.namedparams():
        assert p.grad.dtype == p.array.dtype
    comm.multi_node_mean_grad(m)  # the gradients are the buffer's views now: averaging again changes nothing
    check_mean(m, comm.size, rtol=1e-3 if dtype_b == np.float16 else 1e-6)
    fill(m, comm.rank)  # fresh arrays again
    comm.allreduce_grad(m)
    check_mean(m, comm.size, rtol=1e-3 if dtype_b == np.float16 else 1e-6)


def test_large_and_small_gradients(comm):
    """Gradients large enough to be averaged in place next to small packed ones,
    fresh, repeated (an in-place averaged array moves into the buffer), and
    rewritten in place between calls."""
    m = make_model()
    with m.init_scope():
        m.big = L.Linear(160, 128)  # 80 KiB of W: above two_dimensional's in-place threshold
    for _ in range(2):
        fill(m, comm.rank)
        comm.multi_node_mean_grad(m)
        check_mean(m, comm.size)
        comm.multi_node_mean_grad(m)  # nothing new: the same mean
        check_mean(m, comm.size)
    comm.multi_node_mean_grad(m)
    check_mean(m, comm.size)
    fill(m, comm.rank)
    comm.multi_node_mean_grad(m)
    for i, (_, p) in enumerate(sorted(m.namedparams())):  # rewritten in place, whatever they are now
        p.grad[...] = np.arange(p.size).reshape(p.shape) % 7 + i + comm.rank
    comm.multi_node_mean_grad(m)
    check_mean(m, comm.size)


def test_read_only_and_mixed_gradients(comm):
    """Read-only gradient arrays are left untouched; fresh arrays next to the
    communicator's own views (resident) average correctly too."""
    m = make_model()
    fill(m, comm.rank)
    originals = {}
    for name, p in m.namedparams():
        p.grad.flags.writeable = False
        originals[name] = p.grad.copy()
    comm.multi_node_mean_grad(m)
    check_mean(m, comm.size)
    # a read-only array may be kept as the gradient only if it was not written to
    grads = dict(m.namedparams())
    for name, original in originals.items():
        if not grads[name].grad.flags.writeable:
            np.testing.assert_array_equal(grads[name].grad, original)
    fill(m, comm.rank)
    comm.multi_node_mean_grad(m)  # now views of the communicator's buffer (where it keeps them)
    for i, (_, p) in enumerate(sorted(m.namedparams())):
        if i % 2:  # every other gradient fresh again
            p.grad = (np.arange(p.size).reshape(p.shape) % 7 + i + comm.rank).astype(p.dtype)
        else:  # the others set to this rank's value again, in place
            p.grad[...] = np.arange(p.size).reshape(p.shape) % 7 + i + comm.rank
    comm.multi_node_mean_grad(m)
    check_mean(m, comm.size)


def test_two_models_alternate(comm):
    m1, m2 = make_model(), make_model(np.float64)
    for _ in range(2):
        fill(m1, comm.rank)
        fill(m2, comm.rank)
        comm.multi_node_mean_grad(m1)
        comm.multi_node_mean_grad(m2)
        check_mean(m1, comm.size)
        check_mean(m2, comm.size)


def test_zero_fill(comm):
    m = make_model()
    fill(m, comm.rank)
    m.b.W.grad = None  # missing on every rank
    comm.multi_node_mean_grad(m)  # zero_fill=False: skipped everywhere
    assert m.b.W.grad is None
    fill(m, comm.rank)
    m.b.W.grad = None
    if comm.rank == 0:
        m.a.W.grad = None  # missing on rank 0 only
    comm.multi_node_mean_grad(m, zero_fill=True)
    assert np.all(m.b.W.grad == 0)
    # rank 0 contributed zeros: mean = (sum over ranks 1.. of rank-r grads) / size
    base = np.arange(12).reshape(4, 3) % 7
    want = sum(base + r for r in range(1, comm.size)) / comm.size if comm.size > 1 else 0 * base
    np.testing.assert_allclose(m.a.W.grad, want, rtol=1e-6)


def test_missing_grad_on_some_ranks_raises_everywhere(comm):
    if comm.size == 1:
        pytest.skip("needs a peer")
    m = make_model()
    fill(m, comm.rank)
    if comm.rank == comm.size - 1:
        m.a.b.grad = None
    with pytest.raises(CommunicatorArgumentError, match=r"no gradient for '/a/b'.*zero_fill=True"):
        comm.multi_node_mean_grad(m)
    fill(m, comm.rank)  # and it still works afterwards
    comm.multi_node_mean_grad(m)
    check_mean(m, comm.size)


@pytest.fixture(scope="module")
def naive_comm():
    c = chainermn.create_communicator("naive")
    yield c
    c.finalize()


# the next two do not depend on the averaging strategy: one communicator is enough
def test_shape_mismatch_raises_everywhere(naive_comm):
    comm = naive_comm
    if comm.size == 1:
        pytest.skip("needs a peer")
    m = chainer.Sequential(L.Linear(3, 2 + (comm.rank == 0)))
    m(np.zeros((1, 3), np.float32))
    for _, p in m.namedparams():
        p.grad = np.ones_like(p.array)
    with pytest.raises(CommunicatorArgumentError, match="disagree on the model's parameters"):
        comm.multi_node_mean_grad(m)


def test_wire_dtype_float16(comm):
    c = comm.split(0, comm.rank)  # same ranks, same class, float16 on the wire
    c.set_config("allreduce_grad_dtype", np.float16)
    m = make_model(np.float64)
    fill(m, comm.rank)
    c.multi_node_mean_grad(m)
    check_mean(m, comm.size, rtol=2e-3)
    for _, p in m.namedparams():
        assert p.grad.dtype == p.array.dtype
    c.finalize()


def test_bcast_data_keeps_dtypes(naive_comm):
    comm = naive_comm
    m = make_model(np.float16)
    for i, (_, p) in enumerate(sorted(m.namedparams())):
        p.array[...] = i + comm.rank  # rank 0's values win
    comm.bcast_data(m)
    for i, (_, p) in enumerate(sorted(m.namedparams())):
        assert np.all(p.array == i)
    assert m.b.W.array.dtype == np.float16 and m.a.W.array.dtype == np.float32


def test_dummy_does_not_average():
    c = chainermn.create_communicator("dummy")
    m = make_model()
    fill(m, c.rank)
    c.multi_node_mean_grad(m)
    for i, (_, p) in enumerate(sorted(m.namedparams())):
        np.testing.assert_array_equal(p.grad, np.arange(p.size).reshape(p.shape) % 7 + i + c.rank)
    c.finalize()


def test_default_name_is_created():
    c = chainermn.create_communicator()
    assert type(c).__name__ == "TwoDimensionalCommunicator"
    c.finalize()
