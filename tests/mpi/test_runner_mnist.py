"""The runner end to end on 2 ranks: the mnist recipe for a few iterations,
then a second job in the same run directory that resumes from its checkpoint."""

import tempfile
from pathlib import Path

import pytest

MPI_SIZES = (2,)
MPI_TIMEOUT = 120


@pytest.fixture()
def run_dir(mpi_comm):
    path = tempfile.mkdtemp(prefix="mnframe-runner-") if mpi_comm.rank == 0 else None
    return Path(mpi_comm.bcast(path, root=0)) / "run"


def _train(*overrides):
    from mnframe.commands import cli

    cli.train(["recipe=mnist", "extensions=minimal", "model.n_units=16", "dataset.batch_size=20", *overrides])


def test_mnist_runs_then_resumes(mpi_comm, run_dir):
    _train("trainer.stop=[3,iteration]", "checkpoint.interval=2", f"hydra.run.dir={run_dir}")
    mpi_comm.barrier()
    assert (run_dir / "config.yaml").exists()
    assert (run_dir / "checkpoints" / "iter_00000002").is_dir()
    # a second job in the same directory must resume (resume=must fails otherwise)
    _train("trainer.stop=[4,iteration]", "checkpoint.interval=2", "resume=must", f"hydra.run.dir={run_dir}")
    mpi_comm.barrier()
    assert (run_dir / "checkpoints" / "iter_00000004").is_dir()
