"""Reliability pieces under MPI: collective checkpoint store, watchdog thread vs blocking
MPI calls (GIL), debug-mode matcher, preemption agreement. Expectations from rank/size."""

import os
import tempfile
import threading
import time

import numpy as np
import pytest

from mnframe.runtime import collective_check, oplog, preemption
from mnframe.runtime.errors import CheckpointError, CollectiveMismatch

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 120


@pytest.fixture(scope="module")
def comm():
    import mnframe

    return mnframe.create_communicator("naive")


@pytest.fixture
def shared_dir(comm):
    path = tempfile.mkdtemp(prefix="mnframe-rel-") if comm.rank == 0 else None
    return comm.bcast_obj(path)


def test_collective_save_writes_every_rank_and_verifies(comm, shared_dir):
    from mnframe.checkpoint.store import CheckpointStore

    store = CheckpointStore(os.path.join(shared_dir, "ck"), comm)

    def write(tmp):
        name = f"rank_{comm.rank:05d}.bin"
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(bytes([comm.rank]) * (10 + comm.rank))
        return [name]

    store.save(3, write)
    store.save(6, write)
    name, manifest = store.select("auto")
    assert name == "iter_00000006" and manifest.world_size == comm.size
    assert sorted(manifest.files) == [f"rank_{r:05d}.bin" for r in range(comm.size)]
    assert {e.rank for e in manifest.files.values()} == set(range(comm.size))
    comm.mpi_comm.Barrier()
    if comm.rank == 0:  # damage the last rank's file: every rank must agree to skip it
        with open(os.path.join(store.path(name), f"rank_{comm.size - 1:05d}.bin"), "ab") as f:
            f.write(b"x")
    comm.mpi_comm.Barrier()
    with pytest.raises(CheckpointError, match=f"written by rank {comm.size - 1}"):
        store.select("auto", load=name)
    assert store.select("auto")[0] == "iter_00000003"
    comm.mpi_comm.Barrier()  # the damaged one was moved aside, never deleted
    assert os.path.isdir(store.path(name) + ".damaged")


def test_failure_on_one_rank_fails_save_everywhere(comm, shared_dir):
    from mnframe.checkpoint.store import CheckpointStore

    store = CheckpointStore(os.path.join(shared_dir, "ck2"), comm)

    def write(_tmp):
        if comm.rank == comm.size - 1:
            raise OSError("disk full")
        return []

    from mnframe.runtime.errors import SaveError

    with pytest.raises(SaveError, match=f"rank {comm.size - 1} could not write into .*: disk full"):
        store.save(1, write)
    assert store.select("auto") is None


def test_threads_run_while_main_thread_blocks_in_mpi(comm):
    # mpi4py must release the GIL in blocking calls, or the watchdog could never fire.
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.01)

    t = threading.Thread(target=count)
    t.start()
    if comm.rank == 0:
        time.sleep(0.5)
    before = len(ticks)
    comm.mpi_comm.Barrier()  # other ranks block here ~0.5 s
    comm.mpi_comm.Bcast(bytearray(1), root=0)
    during = len(ticks) - before
    stop.set()
    t.join()
    if comm.rank != 0:
        assert during >= 10, f"the thread ran only {during} times while this rank waited in MPI"


class _Rec:
    def __init__(self, name, shape=(3,), dtype="float32"):
        self.name, self.shape, self.dtype, self.peer = name, shape, dtype, None


def test_debug_matcher_names_first_divergence(comm):
    matcher = collective_check.CollectiveMatcher(comm.mpi_comm)
    matcher(_Rec("allreduce"))
    matcher(_Rec("send"))  # point-to-point: not compared (and issues no collective)
    last = comm.size - 1
    if comm.size > 1:
        with pytest.raises(CollectiveMismatch, match="ranks diverge at collective #2") as info:
            matcher(_Rec("allreduce", shape=(4,) if comm.rank == last else (3,)))
        assert f"rank {last}: allreduce shape (4,)" in str(info.value)
        with pytest.raises(CollectiveMismatch, match="bcast"):
            matcher(_Rec("bcast" if comm.rank == 0 else "allgather"))
    else:
        matcher(_Rec("allreduce"))


def test_preemption_request_on_one_rank_reaches_all(comm):
    try:
        assert not preemption.agree(comm)
        if comm.rank == comm.size - 1:
            preemption.request()
        assert preemption.agree(comm) and preemption.preempted()
    finally:
        preemption._flag.clear()
        preemption._state["agreed"] = False
    if comm.size > 1:  # one rank decides alone, without a collective
        assert oplog.get_log().history[-1].name == "preemption.agree"


def _norm(item):
    """A comparable form of one example (ndarray row, TupleDataset tuple, or a pickled object)."""
    if isinstance(item, tuple):
        return tuple(_norm(v) for v in item)
    return repr(np.asarray(item).tolist())


@pytest.mark.parametrize("kind", ["ndarray", "tuple", "pickle"])
@pytest.mark.parametrize("equal_length", [True, False])
def test_resume_restores_the_checkpointed_shards(comm, monkeypatch, kind, equal_length):
    # Issue 18: scatter_dataset(shuffle=True) without a seed draws a new order each run;
    # the checkpoint's seed must give every rank its old shard back, whatever the layout.
    import chainer

    import mnframe
    from mnframe.datasets import shuffle_seeds

    monkeypatch.setattr(shuffle_seeds, "_scattered", [])
    n = 23
    x = np.arange(2 * n, dtype=np.float32).reshape(n, 2)
    y = np.arange(n, dtype=np.int32) * 10
    make = {
        "ndarray": lambda: x.copy(),
        "tuple": lambda: chainer.datasets.TupleDataset(x.copy(), y.copy()),
        "pickle": lambda: [("example", int(i)) for i in range(n)],
    }[kind]

    def scatter():
        return mnframe.scatter_dataset(
            make() if comm.rank == 0 else None, comm, shuffle=True, force_equal_length=equal_length
        )

    first = scatter()
    expected = [_norm(first[i]) for i in range(len(first))]
    checkpointed = shuffle_seeds.saved_state()  # what a checkpoint written now records
    shuffle_seeds._scattered.clear()  # "the next run": a fresh process scatters again
    second = scatter()
    assert shuffle_seeds.saved_state()[0, 1] != checkpointed[0, 1]
    shuffle_seeds.remember_loaded(checkpointed)
    notes = shuffle_seeds.restore(comm)
    assert any("shards restored" in t for t in notes)
    assert [_norm(second[i]) for i in range(len(second))] == expected
    assert shuffle_seeds.saved_state().tolist() == checkpointed.tolist()
