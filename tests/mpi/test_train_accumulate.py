"""updater.accumulate=N with batch B trains like batch N*B (1-3 ranks): the same
parameters to floating-point tolerance and the same logged losses (the mean over
the micro-batches), on data parallelism and on a model-parallel pipeline."""

import json
import tempfile
from pathlib import Path

import numpy as np

MPI_TIMEOUT = 240


def _dir(mpi_comm, name):
    path = tempfile.mkdtemp(prefix=f"mnframe-acc-{name}-") if mpi_comm.rank == 0 else None
    return Path(mpi_comm.bcast(path, root=0))


def _train(run_dir, *overrides):
    from mnframe.commands import cli

    cli.train(
        [
            "extensions=minimal",
            "optimizer=sgd",
            "optimizer.lr=0.1",
            "dataset.shuffle=false",
            "trainer.stop=[5,iteration]",
            "extensions.log_report.interval=1",
            "extensions.log_report.unit=iteration",
            f"hydra.run.dir={run_dir}",
            *overrides,
        ]
    )


def _params(path):
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def _compare(mpi_comm, small, big, model_file):
    mpi_comm.barrier()
    a, b = _params(small / model_file), _params(big / model_file)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=2e-5, atol=2e-6, err_msg=key)
    log_a = json.loads((small / "log").read_text())
    log_b = json.loads((big / "log").read_text())
    assert [e["iteration"] for e in log_a] == [1, 2, 3, 4, 5]
    for ea, eb in zip(log_a, log_b):
        assert abs(ea["main/loss"] - eb["main/loss"]) <= 1e-5 * max(1.0, abs(eb["main/loss"]))
    assert log_a[-1]["main/loss"] < log_a[1]["main/loss"]  # it trained (update 1 only broadcasts)


def test_accumulating_3_micro_batches_equals_one_3x_batch(mpi_comm):
    small, big = _dir(mpi_comm, "small"), _dir(mpi_comm, "big")
    common = ("recipe=mnist", "model.n_units=16")
    _train(small, *common, "dataset.batch_size=10", "updater.accumulate=3")
    _train(big, *common, "dataset.batch_size=30")
    _compare(mpi_comm, small, big, "model.npz")


def test_accumulation_on_a_model_parallel_pipeline(mpi_comm):
    if mpi_comm.size != 2:
        return  # the mnist_model_parallel graph has 2 ranks
    small, big = _dir(mpi_comm, "mp-small"), _dir(mpi_comm, "mp-big")
    common = ("recipe=mnist_model_parallel",)
    _train(small, *common, "dataset.batch_size=10", "updater.accumulate=2")
    _train(big, *common, "dataset.batch_size=20")
    model_file = f"model_rank{mpi_comm.rank}.npz"
    _compare(mpi_comm, small, big, model_file)
