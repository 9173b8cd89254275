"""Data under MPI: scatter_dataset/scatter_index partitions and the multi-node/synchronized iterators."""

import chainer
import numpy as np
import pytest

import mnframe as chainermn
from mnframe.datasets import partition

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 120


@pytest.fixture(scope="module")
def comm():
    return chainermn.create_communicator("naive")


def _expected_ids(n, comm, shuffle, seed, force_equal_length):
    """This rank's example ids, from the partition rules (not from a run)."""
    begin, end = partition.shard_ranges(n, comm.size, force_equal_length)[comm.rank]
    order = np.random.RandomState(seed).permutation(n) if shuffle else np.arange(n)
    return order[begin:end].tolist()


@pytest.mark.parametrize("n", [0, 1, 7, 10])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("force_equal_length", [True, False])
def test_tuple_dataset_raw_path(comm, n, shuffle, force_equal_length):
    root = comm.size - 1  # root != 0 whenever there is more than one rank
    x = np.arange(n * 6, dtype=np.float64).reshape(n, 2, 3)
    y = np.arange(n, dtype=np.int16)
    ds = chainer.datasets.TupleDataset(x, y) if comm.rank == root else None
    shard = chainermn.scatter_dataset(
        ds, comm, root=root, shuffle=shuffle, seed=5, max_buf_len=40, force_equal_length=force_equal_length
    )
    ids = _expected_ids(n, comm, shuffle, 5, force_equal_length)
    if comm.rank == root and shuffle:  # the root keeps a zero-copy view of its part
        assert isinstance(shard, chainer.datasets.SubDataset)
        xs = np.array([e[0] for e in shard]).reshape(len(shard), 2, 3)
        ys = np.array([e[1] for e in shard], np.int16)
    else:
        assert isinstance(shard, chainer.datasets.TupleDataset)
        xs, ys = shard._datasets
    assert xs.dtype == np.float64 and xs.shape == (len(ids), 2, 3)
    assert ys.dtype == np.int16 and ys.tolist() == ids
    np.testing.assert_array_equal(xs, x[ids])


def test_partition_properties(comm):
    n = 11
    for fel in (True, False):
        ids = comm.mpi_comm.allgather(_expected_ids(n, comm, True, 1, fel))
        shard = chainermn.scatter_dataset(
            np.arange(n) if comm.rank == 0 else None, comm, shuffle=True, seed=1, force_equal_length=fel
        )
        everyone = comm.mpi_comm.allgather([int(e) for e in shard])
        assert everyone == ids
        flat = sorted(i for part in everyone for i in part)
        if fel:
            assert {len(p) for p in everyone} == {-(-n // comm.size)}
            assert set(flat) == set(range(n))
        else:
            assert flat == list(range(n))  # every example exactly once


def test_seed_fixes_permutation(comm):
    a = chainermn.scatter_dataset(np.arange(20), comm, shuffle=True, seed=42)
    b = chainermn.scatter_dataset(np.arange(20), comm, shuffle=True, seed=42)
    assert list(a) == list(b) == _expected_ids(20, comm, True, 42, True)


def test_list_of_objects_pickle_path(comm):
    root = comm.size // 2
    data = [{"id": i, "name": f"ex{i}"} for i in range(9)] if comm.rank == root else None
    shard = chainermn.scatter_dataset(
        data, comm, root=root, shuffle=True, seed=3, max_buf_len=16, force_equal_length=False
    )
    assert isinstance(shard, list)
    assert [e["id"] for e in shard] == _expected_ids(9, comm, True, 3, False)
    assert all(e["name"] == f"ex{e['id']}" for e in shard)


def test_plain_ndarray_keeps_dtype(comm):
    data = np.arange(12, dtype=np.uint8).reshape(6, 2)
    shard = chainermn.scatter_dataset(data, comm)
    ids = _expected_ids(6, comm, False, None, True)
    assert shard.dtype == np.uint8
    np.testing.assert_array_equal(shard, data[ids])


def test_accepts_a_raw_mpi4py_communicator(comm):
    shard = chainermn.scatter_dataset(np.arange(5), comm.mpi_comm, force_equal_length=False)
    assert shard.tolist() == _expected_ids(5, comm, False, None, False)


def test_data_size_error_on_every_rank(comm):
    with pytest.raises(chainermn.DataSizeError, match="max_buf_len"):
        chainermn.scatter_dataset(np.arange(4), comm, max_buf_len=2**31)


def test_failing_dataset_raises_everywhere(comm):
    class Broken:
        def __len__(self):
            return 6

        def __getitem__(self, i):
            raise KeyError(f"no example {i}")

    with pytest.raises(ValueError, match="no example"):
        chainermn.scatter_dataset(Broken() if comm.rank == 0 else None, comm)


@pytest.mark.parametrize("fel", [True, False])
def test_scatter_index(comm, fel):
    root = comm.size - 1
    got = chainermn.scatter_index(10, comm, root=root, force_equal_length=fel)
    assert got == partition.shard_ranges(10, comm.size, fel)[comm.rank]


def test_create_empty_dataset():
    empty = chainermn.create_empty_dataset(np.zeros((5, 3)))
    assert len(empty) == 5 and all(e == () for e in empty)


# ---- iterators ----------------------------------------------------------------------------


def _mixed_dataset(n=7):
    """Examples of mixed types, dtypes and shapes: nothing may be cast on the way."""
    return [(np.full((2, i % 3 + 1), i, np.int64), np.float16(i / 2), i) for i in range(n)]


def test_multi_node_iterator_shares_master_batches(comm):
    master = comm.size - 1
    data = _mixed_dataset()
    it = chainer.iterators.SerialIterator(data, 3, repeat=True, shuffle=comm.rank == master)
    mn = chainermn.iterators.create_multi_node_iterator(it, comm, rank_master=master)
    for _ in range(6):
        batch = mn.next()
        state = (mn.epoch, mn.is_new_epoch, mn.epoch_detail, mn.previous_epoch_detail, mn.current_position)
        everyone = comm.mpi_comm.allgather((batch, state))
        for other_batch, other_state in everyone:
            assert other_state == everyone[0][1]
            for (a, b, c), (a2, b2, c2) in zip(other_batch, everyone[0][0]):
                assert a.dtype == a2.dtype == np.int64 and a.shape == a2.shape
                np.testing.assert_array_equal(a, a2)
                assert type(b) is type(b2) is np.float16 and b == b2 and c == c2
    assert mn.epoch == 2  # 18 examples over 7 per epoch


def test_multi_node_iterator_stop_and_serialize(comm):
    it = chainer.iterators.SerialIterator(list(range(5)), 2, repeat=False, shuffle=False)
    mn = chainermn.iterators.create_multi_node_iterator(it, comm)
    seen = [b for b in mn]
    assert seen == [[0, 1], [2, 3], [4]]
    # every rank writes the same state and can load rank 0's (no communication in serialize)
    saved = {}
    mn.serialize(chainer.serializers.DictionarySerializer(saved))
    picked = {k: saved[k] for k in ("current_position", "epoch", "is_new_epoch")}
    assert comm.mpi_comm.allgather(picked) == [picked] * comm.size
    theirs = comm.mpi_comm.bcast(saved, root=0)
    mn.serialize(chainer.serializers.NpzDeserializer(theirs))
    assert comm.mpi_comm.allgather(mn.epoch_detail) == [mn.epoch_detail] * comm.size


def test_multi_node_iterator_master_error(comm):
    class Bad:
        def __len__(self):
            return 4

        def __getitem__(self, i):
            raise IndexError("bad example")

    it = chainer.iterators.SerialIterator(Bad(), 2, shuffle=False)
    mn = chainermn.iterators.create_multi_node_iterator(it, comm)
    with pytest.raises((IndexError, RuntimeError), match="bad example"):
        mn.next()


def test_synchronized_iterator_shares_order(comm):
    data = [comm.rank * 100 + i for i in range(10)]  # each rank its own data
    it = chainer.iterators.SerialIterator(data, 4, shuffle=True)
    sync = chainermn.iterators.create_synchronized_iterator(it, comm)
    positions = [[x - comm.rank * 100 for x in sync.next()] for _ in range(4)]
    assert comm.mpi_comm.allgather(positions) == [positions] * comm.size
    assert sync.epoch == 1 and isinstance(sync.epoch_detail, float)


def test_multiprocess_iterator_under_mpi(comm):
    """MultiprocessIterator workers under MPI (forkserver applied by the wrapper, as ChainerMN's FAQ advises)."""
    import multiprocessing
    import warnings

    # The start method is the process's: an earlier test in this launch may have fixed it already.
    before = multiprocessing.get_start_method(allow_none=True)
    data = np.arange(12, dtype=np.int32).reshape(6, 2) + comm.rank * 1000
    it = chainer.iterators.MultiprocessIterator(data, 3, shuffle=True, n_processes=1, n_prefetch=1)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sync = chainermn.iterators.create_synchronized_iterator(it, comm)
        if before is None:  # not chosen: the wrapper applies ChainerMN's advice
            assert multiprocessing.get_start_method() == "forkserver"
        else:  # chosen: kept, with a warning when it is fork
            assert multiprocessing.get_start_method() == before
            assert (before == "fork") == any("start method is 'fork'" in str(w.message) for w in caught)
        rows = [(np.asarray(b) - comm.rank * 1000)[:, 0].tolist() for b in (sync.next(), sync.next())]
    finally:
        it.finalize()
    assert comm.mpi_comm.allgather(rows) == [rows] * comm.size
    assert sorted(rows[0] + rows[1]) == [0, 2, 4, 6, 8, 10]
