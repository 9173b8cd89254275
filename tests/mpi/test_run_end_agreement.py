"""The checkpoint extension's early stops under MPI: a non-finite loss seen by ONE rank stops
every rank at the same iteration, without a checkpoint of that iteration (issue 30), and so
does a finite loss that runs away (issue 38 item 7); with ``on_nonfinite="ignore"`` training
goes on; the final checkpoint is written inside the loop."""

import shutil
import tempfile

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
import pytest
from chainer import training

MPI_SIZES = (1, 2, 3)
MPI_TIMEOUT = 120
NAN_AT = 3  # the iteration whose loss is NaN on the last rank
RUNAWAY_AT = 6  # the iteration whose loss is 1e9 (finite) on the last rank


@pytest.fixture
def shared_dir(mpi_comm):
    path = tempfile.mkdtemp(prefix="mnframe-end-") if mpi_comm.rank == 0 else None
    path = mpi_comm.bcast(path, root=0)
    yield path
    mpi_comm.Barrier()
    if mpi_comm.rank == 0:
        shutil.rmtree(path, ignore_errors=True)


class NanOnOneRank(chainer.Chain):
    """A regression whose reported loss is NaN at iteration NAN_AT on rank ``bad`` only
    (its weights stay finite: only the report is poisoned)."""

    def __init__(self, bad, rank, value=float("nan"), at=NAN_AT):
        super().__init__()
        self.bad, self.rank, self.calls = bad, rank, 0
        self.value, self.at = value, at
        with self.init_scope():
            self.l = L.Linear(3, 1)

    def forward(self, x, t):
        self.calls += 1
        loss = F.mean_squared_error(self.l(x), t)
        reported = self.value if (self.rank == self.bad and self.calls == self.at) else float(loss.array)
        chainer.report({"loss": reported}, self)
        return loss


def _run(mpi_comm, out, on_nonfinite, stop=10, interval=1, bad=None, **divergence):
    from mnframe.checkpoint import attach

    np.random.seed(0)
    model = NanOnOneRank(mpi_comm.size - 1, mpi_comm.rank, *(bad or ()))
    optimizer = chainer.optimizers.SGD(lr=0.01)
    optimizer.setup(model)
    rng = np.random.RandomState(1)
    data = chainer.datasets.TupleDataset(rng.randn(8, 3).astype(np.float32), rng.randn(8, 1).astype(np.float32))
    updater = training.updaters.StandardUpdater(chainer.iterators.SerialIterator(data, 4), optimizer)
    trainer = training.Trainer(updater, (stop, "iteration"), out=out)
    ext = attach(trainer, {"interval": interval, "keep": 100}, out, mpi_comm, on_nonfinite=on_nonfinite, **divergence)
    trainer.run()
    ext.save_final(trainer)
    return trainer, ext


def test_nonfinite_on_one_rank_stops_every_rank_at_the_same_iteration(mpi_comm, shared_dir):
    trainer, ext = _run(mpi_comm, shared_dir, "stop")
    iterations = mpi_comm.allgather(trainer.updater.iteration)
    assert iterations == [NAN_AT] * mpi_comm.size
    assert ext.diverged and f"is nan at iteration {NAN_AT} (rank {mpi_comm.size - 1})" in ext.diverged
    assert "lower learning rate" in ext.diverged and "gradient clipping" in ext.diverged
    assert "float32" in ext.diverged and f"iter_{NAN_AT - 1:08d}" in ext.diverged
    # no checkpoint of the non-finite iteration, not even from save_final
    assert ext.last_saved == f"iter_{NAN_AT - 1:08d}"
    assert ext.store.committed()[0] == f"iter_{NAN_AT - 1:08d}"


def test_nonfinite_ignored_trains_on_and_writes_the_final_checkpoint_in_the_loop(mpi_comm, shared_dir):
    trainer, ext = _run(mpi_comm, shared_dir, "ignore", stop=5, interval=1000)
    assert mpi_comm.allgather(trainer.updater.iteration) == [5] * mpi_comm.size
    assert ext.diverged is None and ext.last_saved == "iter_00000005"
    # written inside the loop, with reason "final" (save_final found it already there)
    from mnframe.checkpoint.manifest import Manifest

    assert ext.store.committed()[0] == "iter_00000005"
    assert Manifest.read(ext.store.path("iter_00000005")).reason == "final"


def test_a_runaway_finite_loss_on_one_rank_stops_every_rank_at_the_same_iteration(mpi_comm, shared_dir):
    trainer, ext = _run(mpi_comm, shared_dir, "stop", bad=(1.0e9, RUNAWAY_AT), divergence_warmup=3)
    assert mpi_comm.allgather(trainer.updater.iteration) == [RUNAWAY_AT] * mpi_comm.size
    last = mpi_comm.size - 1
    assert ext.diverged and f"at iteration {RUNAWAY_AT} (rank {last}) (trainer.divergence_factor)" in ext.diverged
    if mpi_comm.rank == last:  # the rank that saw it names the value and the lowest one
        assert "main/loss = 1e+09, above 10000 x its lowest value" in ext.diverged
    assert "trainer.divergence_factor=null" in ext.diverged and "lower learning rate" in ext.diverged
    assert ext.store.committed()[0] == f"iter_{RUNAWAY_AT - 1:08d}"  # that iteration not checkpointed


@pytest.mark.parametrize("how", ["ignore", "factor_off"])
def test_a_runaway_finite_loss_is_trained_on_when_ignored_or_the_rule_is_off(mpi_comm, shared_dir, how):
    on_nonfinite, factor = ("ignore", 1.0e4) if how == "ignore" else ("stop", None)
    trainer, ext = _run(
        mpi_comm, shared_dir, on_nonfinite, stop=8, interval=1000, bad=(1.0e9, RUNAWAY_AT), divergence_factor=factor
    )
    assert mpi_comm.allgather(trainer.updater.iteration) == [8] * mpi_comm.size
    assert ext.diverged is None and ext.last_saved == "iter_00000008"
