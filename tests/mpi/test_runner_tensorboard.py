"""logger=tensorboard on 2 ranks: rank 0 alone writes TensorBoard event files,
and they hold exactly the LogReport's values (read back from the files)."""

import json
import tempfile
from pathlib import Path

from mnframe.testing.tensorboard_events import read_scalars

MPI_SIZES = (2,)
MPI_TIMEOUT = 150


def test_tensorboard_logger_writes_the_log_report_from_rank_0(mpi_comm):
    from mnframe.commands import cli

    path = tempfile.mkdtemp(prefix="mnframe-tb-") if mpi_comm.rank == 0 else None
    run_dir = Path(mpi_comm.bcast(path, root=0)) / "run"
    cli.train(
        [
            "recipe=mnist",
            "logger=tensorboard",
            "extensions=minimal",
            "model.n_units=32",
            "dataset.batch_size=20",
            "trainer.stop=[40,iteration]",
            "extensions.log_report.interval=10",
            "extensions.log_report.unit=iteration",
            "+extensions.evaluator={interval: 20, unit: iteration}",
            f"hydra.run.dir={run_dir}",
        ]
    )
    mpi_comm.barrier()
    log = json.loads((run_dir / "log").read_text())
    assert [e["iteration"] for e in log] == [10, 20, 30, 40]
    assert log[-1]["main/loss"] < log[0]["main/loss"]  # it trained
    files = list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert len(files) == 1, files  # one writer: rank 0's
    scalars = read_scalars(files[0])
    assert set(scalars) == {k for e in log for k in e if k not in ("epoch", "iteration")}
    assert "validation/main/loss" in scalars and "elapsed_time" in scalars
    for entry in log:
        for key, value in entry.items():
            if key in scalars:
                assert abs(scalars[key][entry["iteration"]] - value) <= 1e-6 * max(1.0, abs(value)), key
    assert set(scalars["validation/main/loss"]) == {20, 40}
