"""wire_allreduce's pipelined exchange between "nodes" (here: all ranks of the world), 1-3 ranks.

Cut into many chunks (tiny CHUNK_BYTES) or one, the sum is the same bits on every rank, equal to
the rank-order sum (float32/float64) or to the float16-wire arithmetic (float32 sums of float16
rounded contributions), and the prepare/done hooks see every chunk once, in order.
"""

import numpy as np
import pytest
from mpi4py import MPI

from mnframe.communicators import half_native, wire_allreduce

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 120

world = MPI.COMM_WORLD


def _data(rank, n, dtype):
    return np.random.RandomState(100 + rank).standard_normal(n).astype(dtype)


def _rank_order_sum(n, dtype):
    acc = _data(0, n, dtype)
    for r in range(1, world.size):
        acc = acc + _data(r, n, dtype)
    return acc


def _half_wire_sum(n):
    def rounded(x):
        return x.astype(np.float16).astype(np.float32)

    acc = rounded(_data(0, n, np.float32))
    for r in range(1, world.size):
        acc = acc + rounded(_data(r, n, np.float32))
    return acc if world.size == 1 else rounded(acc)


@pytest.fixture(params=[(1 << 20, 1 << 16), (1 << 10, 7)], ids=["one-chunk", "many-chunks"])
def chunking(request, monkeypatch):
    monkeypatch.setattr(wire_allreduce, "CHUNK_BYTES", request.param[0])
    monkeypatch.setattr(wire_allreduce, "MIN_CHUNK", request.param[1])
    monkeypatch.setattr(wire_allreduce, "PROGRESS_ELEMENTS", max(3, request.param[1] // 3))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 2, 1001, 70_001])
@pytest.mark.usefixtures("chunking")
def test_exchange_is_the_rank_order_sum_on_every_rank(dtype, n):
    arr = _data(world.rank, n, dtype)
    seen = []

    def prepare(a, b):
        seen.append(("p", a, b))

    def done(a, b):
        seen.append(("d", a, b))
        assert np.array_equal(arr[a:b], want[a:b])  # final when announced

    want = _rank_order_sum(n, dtype)
    wire_allreduce.allreduce_exchange(world, arr, prepare=prepare, done=done)
    assert arr.tobytes() == want.tobytes()
    assert len(set(world.allgather(arr.tobytes()))) == 1
    preps = [(a, b) for k, a, b in seen if k == "p"]
    dones = [(a, b) for k, a, b in seen if k == "d"]
    for ranges in (preps, dones):  # each covers [0, n) once, in order
        assert ranges[0][0] == 0 and ranges[-1][1] == n
        assert all(x[1] == y[0] for x, y in zip(ranges, ranges[1:]))
    assert len(preps) >= len(dones)


@pytest.mark.parametrize("n", [3, 70_001])
@pytest.mark.usefixtures("chunking")
def test_float16_wire_is_the_float32_sum_of_rounded_parts(n):
    arr = _data(world.rank, n, np.float32)
    wire_allreduce.allreduce_float32_as_half(world, arr)
    want = _half_wire_sum(n)
    assert len(set(world.allgather(arr.tobytes()))) == 1
    # half.encode rounds exact ties away from zero (NumPy: to even): a contribution may differ by one
    # unit in its last place (up to 2^-8 for |x| < 5), the rounded sum by one more
    bad = ~np.isclose(arr, want, rtol=2e-3, atol=8e-3)
    assert not bad.any(), (np.flatnonzero(bad)[:5], arr[bad][:5], want[bad][:5])
    exact = _rank_order_sum(n, np.float64)
    assert np.linalg.norm(arr - exact) / np.linalg.norm(exact) < 1e-3


@pytest.mark.usefixtures("chunking")
def test_ranks_that_round_ties_differently_still_agree(monkeypatch):
    """Odd ranks convert by table (exact ties away from zero), even ranks by F16C (ties to even, where
    it builds): every float16 value is encoded by one rank and decoded exactly by all, so the ranks
    still end with the same bits."""
    if world.rank % 2:
        monkeypatch.setattr(half_native, "kernels", lambda: None)
    n = 70_001
    rng = np.random.RandomState(7 + world.rank)
    ties = (1 + (2 * rng.randint(0, 1024, n) + 1) * 2.0**-11) * 2.0 ** rng.randint(-10, 10, n)
    arr = np.where(rng.rand(n) < 0.5, ties, -ties).astype(np.float32)  # all exact float16 ties
    wire_allreduce.allreduce_float32_as_half(world, arr)
    assert len(set(world.allgather(arr.tobytes()))) == 1


@pytest.mark.usefixtures("chunking")
def test_prepare_writes_the_contribution():
    """The contribution written by ``prepare`` chunk by chunk is what gets summed."""
    n = 5000
    arr = np.zeros(n, np.float32)
    src = _data(world.rank, n, np.float32)

    def prepare(a, b):
        arr[a:b] = src[a:b] * 2

    wire_allreduce.allreduce_exchange(world, arr, prepare=prepare)
    want = _data(0, n, np.float32) * 2
    for r in range(1, world.size):
        want = want + _data(r, n, np.float32) * 2
    assert arr.tobytes() == want.tobytes()


def _awkward(rank, n, dtype):
    """Values 1/size-scaled as two_dimensional sends them, over many magnitudes, with signed zeros,
    subnormals and infinities of one sign (no NaN: which NaN a + b keeps depends on the order)."""
    rng = np.random.RandomState(300 + rank)
    x = rng.standard_normal(n) * 10.0 ** rng.randint(-30, 30, n)
    x[::7] = -0.0 if rank % 2 else 0.0
    x[3::11] = np.finfo(dtype).tiny / 3 * (rank + 1)  # subnormal
    x[5::13] = np.inf
    return (x.astype(dtype) * dtype(1.0 / world.size)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.usefixtures("chunking")
def test_at_two_ranks_the_exchange_is_bitwise_mpi_allreduce(dtype):
    """Between 2 nodes the exchange sums a + b, and so does every MPI_Allreduce algorithm (IEEE
    addition is commutative): the same bits, however the array is cut. The grounds for BENCHMARKS.md
    13a's comparison, and for any 2-node exchange through MPI_Allreduce. From 3 ranks on MPI's order
    of summation is its own (docs/autotune.md), so the claim is for 1 and 2 ranks."""
    if world.size > 2:
        pytest.skip("MPI_Allreduce's order of summation over 3+ ranks is not the rank order")
    n = 70_001
    mine = _awkward(world.rank, n, dtype)
    arr, ref = mine.copy(), mine.copy()
    wire_allreduce.allreduce_exchange(world, arr)
    world.Allreduce(MPI.IN_PLACE, ref)
    assert arr.tobytes() == ref.tobytes()
    assert np.isinf(arr[5::13]).all() and np.signbit(arr[::7]).any() == (world.size == 1 and world.rank % 2 == 1)
