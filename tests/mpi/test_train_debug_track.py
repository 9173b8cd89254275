"""Debug modes and trackers under MPI (3 ranks): debug=fast trains one iteration
and evaluates once without checkpoints; debug=profile reports every rank's phases and
names the rank that was made slow; logger=mlflow writes one MLflow run, from rank 0,
holding exactly the LogReport's values; debug=overfit drives the loss to about zero."""

import json
import tempfile
import time
from pathlib import Path

import pytest

MPI_SIZES = (3,)
MPI_TIMEOUT = 240

SMALL = ["recipe=mnist", "extensions=minimal", "model.n_units=16", "dataset.batch_size=20"]


def _dir(mpi_comm, name):
    path = tempfile.mkdtemp(prefix=f"mnframe-{name}-") if mpi_comm.rank == 0 else None
    return Path(mpi_comm.bcast(path, root=0)) / "run"


def _train(*overrides):
    from mnframe.commands import cli

    cli.train([*SMALL, *overrides])


def test_debug_fast_one_iteration_one_evaluation_no_checkpoints(mpi_comm):
    run_dir = _dir(mpi_comm, "fast")
    _train("debug=fast", f"hydra.run.dir={run_dir}")
    mpi_comm.barrier()
    [entry] = json.loads((run_dir / "log").read_text())
    assert entry["iteration"] == 1 and "validation/main/loss" in entry and "main/loss" in entry
    assert not (run_dir / "checkpoints").exists()


def test_debug_profile_breaks_down_every_rank_and_names_the_slowest(mpi_comm):
    from mnframe import pipeline
    from mnframe.builder.validate import validate
    from mnframe.config import compose as C
    from mnframe.training.debug import report_profile
    from mnframe.training.micro_batch import PHASES

    run_dir = _dir(mpi_comm, "profile")
    raw = C.compose([*SMALL[1:], "debug=profile", "trainer.stop=[6,iteration]", "checkpoint.interval=100"])
    job = pipeline.build_trainer(validate(raw, mpi_comm.size), str(run_dir), raw, "x")
    slow = mpi_comm.size - 1
    iterator = job.trainer.updater.get_iterator("main")
    if mpi_comm.rank == slow:  # this rank loads its data 30 ms slower
        real_next = iterator.next

        def slow_next():
            time.sleep(0.03)
            return real_next()

        iterator.next = slow_next
    job.trainer.run()
    rows = report_profile(job.timer, job.comms.world, str(run_dir))
    assert len(rows) == mpi_comm.size
    for row in rows:
        assert row["iterations"] == 6
        assert set(PHASES) <= set(row) and all(row[p] >= 0 for p in PHASES)
        assert row["forward"] > 0 and row["backward"] > 0
    assert rows[slow]["data"] > 25  # ms per iteration
    fast = [r for r in range(mpi_comm.size) if r != slow]
    assert all(rows[r]["average"] > rows[slow]["average"] for r in fast)  # the others waited
    mpi_comm.barrier()
    record = json.loads((run_dir / "profile.json").read_text())
    assert record["slowest_rank"] == slow and len(record["ms_per_iteration"]) == mpi_comm.size


def test_mlflow_logger_writes_one_run_from_rank_0(mpi_comm):
    pytest.importorskip("mlflow", reason="mlflow is an optional extra: pip install 'mnframe[mlflow]'")
    run_dir = _dir(mpi_comm, "mlflow")
    _train(
        "logger=mlflow",
        "trainer.stop=[20,iteration]",
        "extensions.log_report.interval=10",
        "extensions.log_report.unit=iteration",
        "+extensions.evaluator={interval: 20, unit: iteration}",
        f"hydra.run.dir={run_dir}",
    )
    mpi_comm.barrier()
    if mpi_comm.rank == 0:
        from mlflow.tracking import MlflowClient

        log = json.loads((run_dir / "log").read_text())
        state = json.loads((run_dir / "mlflow_run.json").read_text())
        client = MlflowClient(tracking_uri=state["tracking_uri"])
        [experiment] = [e for e in client.search_experiments() if e.name == "mnist"]
        [run] = client.search_runs([experiment.experiment_id])  # one run: rank 0's
        assert run.info.run_id == state["run_id"]
        assert run.data.params["dataset.batch_size"] == "20"
        for key in ("main/loss", "validation/main/accuracy"):
            history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
            expected = {e["iteration"]: e[key] for e in log if key in e}
            assert history.keys() == expected.keys(), key
            for step, value in expected.items():
                assert history[step] == pytest.approx(value, rel=1e-6)
    mpi_comm.barrier()


def test_debug_overfit_drives_the_loss_to_about_zero(mpi_comm):
    run_dir = _dir(mpi_comm, "overfit")
    _train(
        "debug=overfit",
        "model.n_units=64",
        "optimizer.alpha=0.01",
        "trainer.stop=[100,iteration]",
        f"hydra.run.dir={run_dir}",
    )
    mpi_comm.barrier()
    log = json.loads((run_dir / "log").read_text())
    assert log[-1]["main/loss"] < 0.01, log
    assert log[-1]["validation/main/loss"] < 0.01  # evaluated on the same batches
    assert log[0]["main/loss"] > 10 * log[-1]["main/loss"]
