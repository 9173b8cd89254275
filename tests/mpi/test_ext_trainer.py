"""Checkpointer, multi-node snapshot, early stopping and observation aggregation under MPI."""

import os
import shutil
import tempfile

import chainer
import chainer.links as L
import numpy as np
import pytest
from chainer import training
from chainer.training import extensions, triggers

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 120


@pytest.fixture(scope="module")
def comm(mpi_comm):
    try:
        import mnframe

        return mnframe.create_communicator("naive", mpi_comm=mpi_comm)
    except (ImportError, AttributeError, NotImplementedError):
        return mpi_comm  # communicators not there yet: the extensions accept an mpi4py comm


@pytest.fixture
def shared_dir(mpi_comm):
    """One directory for all ranks (rank 0 creates and removes it)."""
    path = tempfile.mkdtemp(prefix="mnframe-ext-") if mpi_comm.rank == 0 else None
    path = mpi_comm.bcast(path, root=0)
    yield path
    mpi_comm.Barrier()
    if mpi_comm.rank == 0:
        shutil.rmtree(path, ignore_errors=True)


def _trainer(out, stop=(100, "iteration"), seed=0):
    """A tiny deterministic trainer (same on every rank)."""
    np.random.seed(seed)
    model = L.Classifier(L.Linear(3, 2))
    optimizer = chainer.optimizers.MomentumSGD(lr=0.1)
    optimizer.setup(model)
    rng = np.random.RandomState(1)
    data = chainer.datasets.TupleDataset(rng.randn(8, 3).astype(np.float32), rng.randint(0, 2, size=8).astype(np.int32))
    it = chainer.iterators.SerialIterator(data, 4, shuffle=False)
    updater = training.updaters.StandardUpdater(it, optimizer)
    return training.Trainer(updater, stop, out=out), model, optimizer


def _params(model):
    return {n: p.array.copy() for n, p in model.namedparams()}


# --------------------------------------------------------------------------- checkpointer


def test_checkpointer_gc_restart_and_corrupt_file(comm, mpi_comm, shared_dir):
    from mnframe import create_multi_node_checkpointer

    rank, size = mpi_comm.rank, mpi_comm.size
    trainer, model, _ = _trainer(shared_dir)
    updater = trainer.updater  # the loop without a trainer, as in the spec's second example
    cp = create_multi_node_checkpointer("run", comm, cp_interval=2, gc_interval=2, path=shared_dir)
    assert cp.maybe_load(updater) is None  # nothing to resume from
    assert updater.iteration == 0
    saved = {}
    for _ in range(7):
        updater.update()
        cp.save(updater)
        saved[updater.iteration] = _params(model)
    mine = sorted(int(n.split(".")[2]) for n in os.listdir(shared_dir) if n.startswith(f"run.{rank}."))
    assert mine == [5, 6, 7]  # GC at 4 kept [3, 4]; at 6 kept [5, 6]; then 7
    assert not [n for n in os.listdir(shared_dir) if n.startswith(f".run.{rank}.")]  # no temp left
    assert cp.get_stats()["count"] == 7

    # A crash: the last rank never finished iteration 7, rank 0's file 6 is truncated.
    mpi_comm.Barrier()
    if rank == size - 1:
        os.remove(os.path.join(shared_dir, f"run.{rank}.7"))
    if rank == 0:
        p = os.path.join(shared_dir, "run.0.6")
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) // 2)
    mpi_comm.Barrier()

    trainer2, model2, _ = _trainer(shared_dir, seed=123)

    class _Opt:  # stands in for a multi-node optimizer's flag
        needs_broadcast = True

    opt = _Opt()
    cp2 = create_multi_node_checkpointer("run", comm, cp_interval=2, gc_interval=2)
    with pytest.warns(UserWarning, match="damaged") if rank == 0 else _nothing():
        resumed = cp2.maybe_load(trainer2.updater, opt, path=shared_dir)
    assert resumed == 5
    assert trainer2.updater.iteration == 5
    assert opt.needs_broadcast is False
    for name, value in saved[5].items():
        np.testing.assert_array_equal(_params(model2)[name], value)

    cp2.finalize()
    mpi_comm.Barrier()
    assert not [n for n in os.listdir(shared_dir) if n.startswith(f"run.{rank}.")]


def test_checkpointer_keeps_files_when_training_fails(comm, mpi_comm, shared_dir):
    from mnframe import create_multi_node_checkpointer

    trainer, _, _ = _trainer(shared_dir, stop=(3, "iteration"))
    cp = create_multi_node_checkpointer("fail", comm)
    trainer.extend(cp, trigger=(1, "iteration"))

    def boom(tr):
        if tr.updater.iteration == 2:
            raise RuntimeError("simulated failure")

    trainer.extend(boom, trigger=(1, "iteration"), priority=-1000)
    with pytest.raises(RuntimeError, match="simulated"):
        trainer.run(show_loop_exception_msg=False)
    mine = sorted(n for n in os.listdir(shared_dir) if n.startswith(f"fail.{mpi_comm.rank}."))
    assert mine == [f"fail.{mpi_comm.rank}.1", f"fail.{mpi_comm.rank}.2"]

    # A normal end cleans up.
    trainer2, _, _ = _trainer(shared_dir, stop=(4, "iteration"))
    cp2 = create_multi_node_checkpointer("fail", comm)
    trainer2.extend(cp2, trigger=(1, "iteration"))
    assert cp2.maybe_load(trainer2) == 2
    trainer2.run()
    assert trainer2.updater.iteration == 4
    assert not [n for n in os.listdir(shared_dir) if n.startswith(f"fail.{mpi_comm.rank}.")]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# --------------------------------------------------------------------------- snapshot


def test_multi_node_snapshot_replica_sets_and_autoload(comm, mpi_comm, shared_dir):
    from mnframe.extensions import multi_node_snapshot

    size = mpi_comm.size
    trainer, model, _ = _trainer(shared_dir, stop=(3, "iteration"))
    snap = extensions.snapshot(filename="snap_iter_{.updater.iteration}", autoload=True)
    trainer.extend(multi_node_snapshot(comm, snap, [0]), trigger=(3, "iteration"))
    trainer.run()
    assert snap.filename == "snap_iter_{.updater.iteration}"  # the caller's object is untouched
    expected_params = _params(model)
    mpi_comm.Barrier()
    masters = [0] + ([1] if size > 1 else [])
    assert sorted(n for n in os.listdir(shared_dir) if n.startswith("snap_")) == sorted(
        f"snap_iter_3.{m}" for m in masters
    )

    # Restart: a fresh trainer autoloads; non-masters receive their master's state.
    trainer2, model2, _ = _trainer(shared_dir, stop=(3, "iteration"), seed=99)
    snap2 = extensions.snapshot(filename="snap_iter_{.updater.iteration}", autoload=True)
    trainer2.extend(multi_node_snapshot(comm, snap2, [0]), trigger=(3, "iteration"))
    trainer2.run()
    assert trainer2.updater.iteration == 3
    for name, value in expected_params.items():
        np.testing.assert_array_equal(_params(model2)[name], value)


# --------------------------------------------------------------------------- aggregation


class _StubTrainer:
    def __init__(self):
        self.observation = {}


def test_observation_aggregator_averages_variables_and_numbers(comm, mpi_comm):
    from mnframe.extensions import ObservationAggregator

    rank, size = mpi_comm.rank, mpi_comm.size
    fire = {"now": False}
    agg = ObservationAggregator(comm, "loss", "loss_all", comm_trigger=lambda _t: fire["now"])
    trainer = _StubTrainer()
    values = [chainer.Variable(np.array(float(rank), dtype=np.float32)), np.float64(rank + 1.0), rank + 2.0]
    for i, v in enumerate(values):
        fire["now"] = i == len(values) - 1
        trainer.observation = {"loss": v}
        agg(trainer)
        assert ("loss_all" in trainer.observation) == fire["now"]
    expected = np.mean([r + k for r in range(size) for k in range(3)])
    assert trainer.observation["loss_all"] == pytest.approx(expected)
    assert isinstance(trainer.observation["loss_all"], float)

    # A custom aggregator sees every rank's history, in rank order.
    agg2 = ObservationAggregator(comm, "x", comm_trigger=lambda _t: True, aggregator=lambda hs: [len(h) for h in hs])
    trainer.observation = {"x": 1.0} if rank % 2 == 0 else {}
    agg2(trainer)
    assert trainer.observation["x"] == [1 if r % 2 == 0 else 0 for r in range(size)]


class _ScriptedLoss(chainer.Link):
    """Reports a loss that depends on the call count (= epoch) and the rank."""

    def __init__(self, schedule):
        super().__init__()
        with self.init_scope():
            self.w = chainer.Parameter(np.zeros((1,), dtype=np.float32))
        self.schedule = schedule
        self.calls = 0

    def forward(self, _x):
        self.calls += 1
        loss = chainer.functions.sum(self.w * 0) + self.schedule(self.calls)
        chainer.report({"loss": loss}, self)
        return loss


def _run_until_stop(schedule, make_trigger):
    model = _ScriptedLoss(schedule)
    opt = chainer.optimizers.SGD()
    opt.setup(model)
    it = chainer.iterators.SerialIterator(np.zeros((1, 1), np.float32), 1, shuffle=False)
    updater = training.updaters.StandardUpdater(it, opt)
    trainer = training.Trainer(updater, make_trigger(), out=tempfile.gettempdir())
    trainer.run()
    return trainer.updater.iteration


def test_early_stopping_decided_on_the_global_mean(comm, mpi_comm):
    from mnframe.extensions import MultiNodeEarlyStoppingTrigger

    rank, size = mpi_comm.rank, mpi_comm.size
    global_mean = [5.0, 4.0, 3.0, 3.5, 3.6, 3.7, 3.8, 3.9, 4.0, 4.1]

    def local(e):  # rank offsets sum to zero; some ranks alone would stop at other epochs
        return global_mean[e - 1] + (rank - (size - 1) / 2.0) * 0.9 * e

    expected = _run_until_stop(
        lambda e: global_mean[e - 1],
        lambda: triggers.EarlyStoppingTrigger(monitor="main/loss", patience=2, max_trigger=(10, "epoch")),
    )
    got = _run_until_stop(
        local, lambda: MultiNodeEarlyStoppingTrigger(comm, monitor="main/loss", patience=2, max_trigger=(10, "epoch"))
    )
    assert expected < 10
    assert got == expected
    assert mpi_comm.allgather(got) == [expected] * size
