"""The model-parallel MNIST recipe (MLP split over 2 ranks) runs a few iterations."""
import tempfile
from pathlib import Path

MPI_SIZES = (2,)
MPI_TIMEOUT = 90


def test_model_parallel_recipe_runs(mpi_comm):
    from mnframe import cli

    path = tempfile.mkdtemp(prefix="mnframe-mp-") if mpi_comm.rank == 0 else None
    run_dir = Path(mpi_comm.bcast(path, root=0)) / "run"
    cli.train(["recipe=mnist_model_parallel", "extensions=minimal", "trainer.stop=[2,iteration]",
               "topology.ranks.0.stages.0.module.n_units=16",
               "topology.ranks.1.stages.0.module.n_units=16",
               "dataset.batch_size=10", f"hydra.run.dir={run_dir}"])
    mpi_comm.barrier()
    assert (run_dir / "config.yaml").exists()
