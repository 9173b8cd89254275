"""Array and object operations of the communicators, under mpiexec; expectations from rank and size."""

import numpy as np
import pytest

import mnframe as chainermn
from mnframe.communicators import array_collectives
from mnframe.communicators.verdict import CommunicatorArgumentError

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 120

DTYPES = [np.float16, np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_]


@pytest.fixture(scope="module")
def comm():
    c = chainermn.create_communicator("naive")
    yield c
    c.finalize()


@pytest.fixture(params=[False, True], ids=["whole", "chunked"])
def chunking(request, monkeypatch):
    if request.param:  # many tiny pieces: the >2 GiB code path without 2 GiB
        monkeypatch.setattr(array_collectives, "CHUNK_BYTES", 7)
        monkeypatch.setattr(array_collectives, "ALLREDUCE_CHUNK_BYTES", 7)
    return request.param


def value(rank, shape, dtype):
    """Rank-dependent test data of any dtype and shape."""
    n = int(np.prod(shape, dtype=np.int64))
    a = (np.arange(n) + 3 * rank + 1) % 5
    return a.astype(dtype).reshape(shape)


def noncontig(a):
    """A non-contiguous array equal to ``a`` (a strided view of a larger array)."""
    big = np.zeros(a.shape + (2,), a.dtype)
    big[..., 0] = a
    return big[..., 0]


def test_topology(comm):
    assert (comm.rank, comm.size) == (comm.mpi_comm.rank, comm.mpi_comm.size)
    assert comm.inter_size == 1 and comm.inter_rank == 0  # one machine, no fake nodes here
    assert (comm.intra_rank, comm.intra_size) == (comm.rank, comm.size)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3, 2)])
@pytest.mark.usefixtures("chunking")
def test_allreduce(comm, dtype, shape):
    x = value(comm.rank, shape, dtype)
    got = comm.allreduce(noncontig(x) if x.ndim else x)
    parts = [value(r, shape, dtype) for r in range(comm.size)]
    if dtype == np.bool_:
        want = np.logical_or.reduce(parts)
    else:
        want = sum(p.astype(np.float64) for p in parts).astype(dtype)
    assert got.dtype == np.dtype(dtype) and got.shape == shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.usefixtures("chunking")
def test_bcast_gather_allgather_scatter(comm, dtype):
    root = comm.size - 1
    x = value(root, (4, 3), dtype)
    got = comm.bcast(noncontig(x) if comm.rank == root else None, root=root)
    np.testing.assert_array_equal(got, x)
    mine = value(comm.rank, (comm.rank + 1, 2), dtype)  # shapes differ by rank
    gathered = comm.gather(noncontig(mine), root=root)
    if comm.rank == root:
        assert len(gathered) == comm.size
        for r, g in enumerate(gathered):
            np.testing.assert_array_equal(g, value(r, (r + 1, 2), dtype))
    else:
        assert gathered is None
    everyone = comm.allgather(mine)
    for r, g in enumerate(everyone):
        np.testing.assert_array_equal(g, value(r, (r + 1, 2), dtype))
    parts = tuple(value(r, (r, 2), dtype) for r in range(comm.size))
    np.testing.assert_array_equal(comm.scatter(parts if comm.rank == root else None, root=root), parts[comm.rank])
    stacked = np.stack([value(r, (2,), dtype) for r in range(comm.size)])
    np.testing.assert_array_equal(comm.scatter(stacked, root=0), stacked[comm.rank])


@pytest.mark.parametrize("dtype", [np.float16, np.bool_, np.int64])
@pytest.mark.usefixtures("chunking")
def test_alltoall(comm, dtype):
    xs = tuple(value(comm.rank * 10 + j, (j + 1,), dtype) for j in range(comm.size))
    ys = comm.alltoall(xs)
    assert len(ys) == comm.size
    for i, y in enumerate(ys):
        np.testing.assert_array_equal(y, value(i * 10 + comm.rank, (comm.rank + 1,), dtype))


@pytest.mark.parametrize("shape", [(), (0,), (5, 3)])
@pytest.mark.usefixtures("chunking")
def test_send_recv_ring(comm, shape):
    if comm.size == 1:
        pytest.skip("needs a peer")
    dest, src = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    x = value(comm.rank, shape, np.float16)
    # even ranks send first, odd ranks receive first: no deadlock with blocking sends
    for turn in range(2):
        if (comm.rank + turn) % 2 == 0:
            comm.send(noncontig(x) if x.ndim else x, dest, 7)
            comm.send((x, value(comm.rank, (2,), np.int32)), dest, 8)
        else:
            got = comm.recv(src, 7)
            np.testing.assert_array_equal(got, value(src, shape, np.float16))
            a, b = comm.recv(src, 8)
            np.testing.assert_array_equal(b, value(src, (2,), np.int32))
    # also in the odd-size case every rank both sent and received once per tag


@pytest.mark.usefixtures("chunking")
def test_objects(comm):
    root = comm.size - 1
    obj = {"rank": comm.rank, "data": list(range(comm.rank + 3))}
    assert comm.bcast_obj(obj if comm.rank == root else None, root=root)["rank"] == root
    got = comm.gather_obj(obj, root=0)
    if comm.rank == 0:
        assert [o["rank"] for o in got] == list(range(comm.size))
    else:
        assert got is None
    assert comm.allreduce_obj(comm.rank + 1) == comm.size * (comm.size + 1) // 2
    assert comm.allreduce_obj([comm.rank]) == list(range(comm.size))
    if comm.size > 1:
        if comm.rank == 0:
            comm.send_obj(("hello", 1), dest=1, tag=3)
        elif comm.rank == 1:
            assert comm.recv_obj(0, tag=3) == ("hello", 1)
            comm.send_obj("any-tag", dest=0, tag=11)
        if comm.rank == 0:
            assert comm.recv_obj(1) == "any-tag"


def test_split(comm):
    sub = comm.split(comm.rank % 2, comm.rank)
    members = [r for r in range(comm.size) if r % 2 == comm.rank % 2]
    assert sub.size == len(members) and sub.rank == members.index(comm.rank)
    assert type(sub) is type(comm)
    assert sub.allreduce_obj(comm.rank) == sum(members)
    sub.finalize()


def test_config_is_per_instance(comm):
    other = chainermn.create_communicator("flat", batched_copy=False, allreduce_grad_dtype="float16")
    assert other.get_config("batched_copy") is False and comm.get_config("batched_copy") is True  # 7.8.1's default
    assert other.get_config()["allreduce_grad_dtype"] == np.float16
    other.set_config("batched_copy")
    assert other.get_config("batched_copy") is True and other.batched_copy is True
    with pytest.raises(ValueError, match="unknown communicator config"):
        other.set_config("bogus", 1)
    other.finalize()


# -- shared verdicts: the bad argument is on one rank only, every rank raises


def test_allreduce_shape_mismatch(comm):
    if comm.size == 1:
        pytest.skip("needs a peer")
    with pytest.raises(CommunicatorArgumentError, match="same shape and dtype"):
        comm.allreduce(np.zeros(2 if comm.rank == 0 else 3))


def test_alltoall_wrong_length_on_one_rank(comm):
    n = comm.size + (1 if comm.rank == 0 else 0)
    with pytest.raises(CommunicatorArgumentError, match=r"rank 0: alltoall needs"):
        comm.alltoall(tuple(np.zeros(1) for _ in range(n)))


def test_gather_dtype_mismatch(comm):
    if comm.size == 1:
        pytest.skip("needs a peer")
    with pytest.raises(CommunicatorArgumentError, match="same dtype"):
        comm.gather(np.zeros(2, np.float32 if comm.rank else np.float64))


def test_unpicklable_object_at_root(comm):
    obj = (lambda: 0) if comm.rank == 0 else None
    with pytest.raises(CommunicatorArgumentError, match="cannot pickle"):
        comm.bcast_obj(obj, root=0)
    with pytest.raises(CommunicatorArgumentError, match="rank 0: cannot pickle"):
        comm.gather_obj(obj)
    # and the communicator still works afterwards
    assert comm.allreduce_obj(1) == comm.size


def test_scatter_wrong_count(comm):
    with pytest.raises(CommunicatorArgumentError, match="scatter needs"):
        comm.scatter(tuple(np.zeros(1) for _ in range(comm.size + 1)) if comm.rank == 0 else None)
