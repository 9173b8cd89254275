"""A rank file copied from another run into the newest checkpoint, the manifest resealed as an
attacker would (issue 38, item 3): every rank refuses the checkpoint together before loading
anything (the optimizer's and scatter_dataset's restores are collectives that a foreign file
would desynchronise: the hang of the issue), moves it aside and resumes the previous one; the
training then runs to its end. A 30 s collective deadline turns a hang into a failure."""

import hashlib
import json
import os
import shutil
import tempfile

import chainer
import chainer.links as L
import numpy as np
import pytest
from chainer import training

import mnframe as chainermn

MPI_SIZES = (2, 3)
MPI_TIMEOUT = 180


@pytest.fixture
def comm():
    return chainermn.create_communicator("naive")


@pytest.fixture
def shared_dir(mpi_comm):
    path = tempfile.mkdtemp(prefix="mnframe-foreign-") if mpi_comm.rank == 0 else None
    path = mpi_comm.bcast(path, root=0)
    yield path
    mpi_comm.Barrier()
    if mpi_comm.rank == 0:
        shutil.rmtree(path, ignore_errors=True)


def _trainer(comm, out, stop):
    np.random.seed(0)
    model = L.Classifier(L.Linear(3, 2))
    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm)
    optimizer.setup(model)
    data = None
    if comm.rank == 0:
        rng = np.random.RandomState(1)
        x, t = rng.randn(24, 3).astype(np.float32), rng.randint(0, 2, size=24).astype(np.int32)
        data = chainer.datasets.TupleDataset(x, t)
    shard = chainermn.scatter_dataset(data, comm, shuffle=True)  # unseeded: restored from the checkpoint
    it = chainer.iterators.SerialIterator(shard, 2, shuffle=True)
    return training.Trainer(training.updaters.StandardUpdater(it, optimizer), (stop, "iteration"), out=out)


def _reseal(directory):
    path = os.path.join(directory, "manifest.json")
    manifest = json.loads(open(path).read())
    for name, entry in manifest["files"].items():
        data = open(os.path.join(directory, name), "rb").read()
        entry.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    open(path, "w").write(json.dumps(manifest))


def test_a_rank_file_from_another_run_falls_back_on_every_rank_without_a_hang(comm, mpi_comm, shared_dir):
    from mnframe.checkpoint.attach import attach
    from mnframe.runtime import watchdog

    watchdog.set_deadline(30)
    try:
        ours, theirs = os.path.join(shared_dir, "ours"), os.path.join(shared_dir, "theirs")
        for run in (ours, theirs):
            trainer = _trainer(comm, run, 4)
            attach(trainer, {"interval": 2}, run, comm)
            trainer.run()
        mpi_comm.Barrier()
        newest = os.path.join(ours, "checkpoints", "iter_00000004")
        victim = f"rank_{comm.size - 1:05d}.npz"
        if comm.rank == 0:
            shutil.copy(os.path.join(theirs, "checkpoints", "iter_00000004", victim), os.path.join(newest, victim))
            _reseal(newest)
        mpi_comm.Barrier()

        trainer = _trainer(comm, ours, 6)
        ext = attach(trainer, {"interval": 2}, ours, comm)
        assert mpi_comm.allgather(ext.resumed_from) == ["iter_00000002"] * comm.size
        assert trainer.updater.iteration == 2
        trainer.run()  # the collectives of the loaded state agree: training reaches its end
        assert trainer.updater.iteration == 6
        mpi_comm.Barrier()
        assert os.path.isdir(newest + ".damaged")  # moved aside, never deleted
    finally:
        watchdog.set_deadline(600)
