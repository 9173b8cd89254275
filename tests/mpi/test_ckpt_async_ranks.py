"""Asynchronous checkpoints on 1, 2 and 3 ranks (issue 31): resuming from one gives the parameters a
synchronous save gives, on every rank; a background write that fails on the last rank stops every
rank at the same iteration with the same SaveError, and the previous checkpoint is kept."""

import errno
import os
import shutil
import tempfile
import threading
import time

import chainer
import chainer.links as L
import numpy as np
import pytest
from chainer import training

MPI_TIMEOUT = 180


@pytest.fixture
def shared_dir(mpi_comm):
    path = tempfile.mkdtemp(prefix="mnframe-async-") if mpi_comm.rank == 0 else None
    path = mpi_comm.bcast(path, root=0)
    yield path
    mpi_comm.Barrier()
    if mpi_comm.rank == 0:
        shutil.rmtree(path, ignore_errors=True)


def _trainer(out, stop, rank):
    np.random.seed(0)
    model = L.Classifier(L.Linear(3, 2))
    optimizer = chainer.optimizers.MomentumSGD(lr=0.1)
    optimizer.setup(model)
    rng = np.random.RandomState(1 + rank)  # each rank trains on its own data: the files differ per rank
    data = chainer.datasets.TupleDataset(
        rng.randn(16, 3).astype(np.float32), rng.randint(0, 2, size=16).astype(np.int32)
    )
    it = chainer.iterators.SerialIterator(data, 4, shuffle=True)
    return training.Trainer(training.updaters.StandardUpdater(it, optimizer), (stop, "iteration"), out=out)


def _params(trainer):
    model = trainer.updater.get_optimizer("main").target
    return {k: p.array.copy() for k, p in model.namedparams()}


def test_resume_from_an_async_checkpoint_equals_resume_from_a_sync_one(mpi_comm, shared_dir):
    from mnframe.checkpoint.attach import attach
    from mnframe.checkpoint.manifest import Manifest

    rank, size = mpi_comm.rank, mpi_comm.size
    for mode in ("sync", "async"):
        out = os.path.join(shared_dir, mode)
        trainer = _trainer(out, 6, rank)
        attach(trainer, {"interval": 2, "keep": 10, "async_save": mode == "async"}, out, mpi_comm)
        trainer.run()
    for name in ("iter_00000002", "iter_00000004"):
        loaded = {}
        for mode in ("sync", "async"):
            out = os.path.join(shared_dir, mode)
            manifest = Manifest.read(os.path.join(out, "checkpoints", name))
            assert manifest.world_size == size and len(manifest.files) == size
            trainer = _trainer(out, 100, rank)
            ext = attach(trainer, {"load": name}, out, mpi_comm)
            assert ext.resumed_from == name and trainer.updater.iteration == manifest.iteration
            loaded[mode] = _params(trainer)
        assert all(np.array_equal(loaded["sync"][k], loaded["async"][k]) for k in loaded["sync"])
        everyone = mpi_comm.allgather(loaded["async"]["/predictor/W"])
        assert size == 1 or not np.array_equal(everyone[0], everyone[1])  # each rank loaded its own file


def test_background_failure_on_the_last_rank_stops_every_rank_together(mpi_comm, shared_dir):
    from mnframe.checkpoint import async_save
    from mnframe.checkpoint.attach import attach
    from mnframe.runtime.errors import SaveError

    rank, size = mpi_comm.rank, mpi_comm.size
    calls = [0]

    def fails_on_last_rank(directory, r, arrays):
        calls[0] += 1
        if r == size - 1 and calls[0] == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        if r == 0 and calls[0] == 2:
            time.sleep(0.5)  # rank 0's write starts after the failure is seen (a loaded machine)
        return async_save.write_rank_file(directory, r, arrays)

    trainer = _trainer(shared_dir, 30, rank)
    ext = attach(trainer, {"interval": 2, "async_save": True}, shared_dir, mpi_comm)
    ext.background.writer = fails_on_last_rank
    ext.abort_on_error = False
    with pytest.raises(SaveError) as info:
        trainer.run()
    text = str(info.value)
    assert f"rank {size - 1} " in text and "No space left on device" in text and "iter_00000002 is kept" in text
    stopped = mpi_comm.allgather(trainer.updater.iteration)
    assert len(set(stopped)) == 1 and 4 < stopped[0] < 30  # every rank, at the same iteration, soon after the save
    # no rank's save thread outlives the failure, so none can write after rank 0 removed the staging
    assert not [t.name for t in threading.enumerate() if t.name.startswith("mnframe-async-save")]
    mpi_comm.Barrier()
    assert sorted(os.listdir(os.path.join(shared_dir, "checkpoints"))) == ["iter_00000002"]
