"""A multi-node iterator's state loads into a plain Chainer iterator, on every rank.

ChainerMN's iterator-compatibility scenario: iterate a multi-node iterator
twice, serialize it, load the state into a fresh SerialIterator (or
MultiprocessIterator) and continue the epoch. The shuffling Chainer iterators
require the ``order`` key; a follower rank used not to write it, so the load
failed with ``KeyError: '_order'`` on every rank but the master (which looked
intermittent when only one rank's report was read). Repeated many times, with
the master in turn on every rank, over fresh iterators and across epochs.
"""

import chainer
import numpy as np
import pytest

import mnframe as chainermn

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 240

N, BATCH = 6, 2
REPEATS = 25


class RecordingSerializer(chainer.serializer.Serializer):
    """Writes every key into a dict (like ChainerMN's test helper)."""

    def __init__(self, target):
        self.target = target

    def __getitem__(self, key):
        raise NotImplementedError

    def __call__(self, key, value):
        self.target[key] = value
        return value


class DictDeserializer(chainer.serializer.Deserializer):
    """Reads every key from a dict; a missing key raises KeyError (strict, like NpzDeserializer)."""

    def __init__(self, target):
        self.target = target

    def __getitem__(self, key):
        raise NotImplementedError

    def __call__(self, key, value):
        stored = self.target[key]
        if value is None:
            return stored
        if isinstance(value, np.ndarray):
            np.copyto(value, stored)
            return value
        return type(value)(np.asarray(stored))


@pytest.fixture(scope="module")
def comm():
    return chainermn.create_communicator("naive")


def _plain(cls, data, **kw):
    if cls is chainer.iterators.MultiprocessIterator:
        kw.update(n_processes=1, n_prefetch=1)
    return cls(data, BATCH, **kw)


@pytest.mark.parametrize(
    "cls",
    [
        chainer.iterators.SerialIterator,
        # slow: a worker process for each fresh iterator; the same checks as Serial's, once with each
        # rank as the master (Serial's REPEATS are the ones that look for an intermittent failure)
        pytest.param(chainer.iterators.MultiprocessIterator, marks=pytest.mark.slow),
    ],
)
def test_state_loads_into_a_plain_iterator(comm, cls):
    data = np.arange(N, dtype=np.float32)
    ratio = BATCH / N
    for repeat in range(REPEATS if cls is chainer.iterators.SerialIterator else comm.size):
        master = repeat % comm.size
        actual = _plain(cls, data)
        mn = chainermn.iterators.create_multi_node_iterator(actual, comm, rank_master=master)
        plain = None
        try:
            assert mn.epoch == 0 and mn.epoch_detail == pytest.approx(0.0)
            first, second = mn.next(), mn.next()
            assert len(first) == len(second) == BATCH and not mn.is_new_epoch
            assert mn.epoch_detail == pytest.approx(2 * ratio)
            state = {}
            mn.serialize(RecordingSerializer(state))
            assert "order" in state, f"rank {comm.rank} (master {master}) wrote no order: {sorted(state)}"
            plain = _plain(cls, data)
            plain.serialize(DictDeserializer(state))
            assert not plain.is_new_epoch and plain.epoch_detail == pytest.approx(2 * ratio)
            third = plain.next()
            assert plain.is_new_epoch and plain.epoch_detail == pytest.approx(3 * ratio)
            # the rest of the master's epoch, on every rank
            assert sorted(first + second + third) == data.tolist()
            assert comm.mpi_comm.allgather(third) == [third] * comm.size
        finally:
            if plain is not None:
                plain.finalize()
            actual.finalize()


def test_followers_mirror_the_order_of_every_epoch(comm):
    """After reshuffles (new epochs) the state still continues the master's current epoch."""
    data = np.arange(N, dtype=np.float32)
    for repeat in range(REPEATS):
        master = (comm.size - 1 - repeat) % comm.size
        mn = chainermn.iterators.create_multi_node_iterator(
            chainer.iterators.SerialIterator(data, BATCH), comm, rank_master=master
        )
        steps = 1 + repeat % 7  # stop anywhere in the first three epochs
        seen = [mn.next() for _ in range(steps)]
        state = {}
        mn.serialize(RecordingSerializer(state))
        plain = chainer.iterators.SerialIterator(data, BATCH)
        plain.serialize(DictDeserializer(state))
        per_epoch = N // BATCH
        done = steps % per_epoch or per_epoch  # batches of the current epoch already seen
        rest = [plain.next() for _ in range(per_epoch - done)]
        epoch = sum(seen[-done:] + rest, [])
        assert sorted(epoch) == data.tolist()
        assert comm.mpi_comm.allgather(rest) == [rest] * comm.size


def test_loading_keeps_followers_on_the_master_batches(comm):
    """A loaded order changes the master's batches; the followers keep yielding the master's."""
    data = np.arange(N, dtype=np.float32)
    mn = chainermn.iterators.create_multi_node_iterator(chainer.iterators.SerialIterator(data, BATCH), comm)
    mn.next()
    state = {}
    mn.serialize(RecordingSerializer(state))
    state = comm.mpi_comm.bcast(state, root=0)
    state["order"] = np.roll(state["order"], 1)
    mn.serialize(DictDeserializer(state))
    batch = mn.next()
    assert comm.mpi_comm.allgather(batch) == [batch] * comm.size
    assert batch == data[state["order"][BATCH : 2 * BATCH]].tolist()
