"""``python -m mnframe`` as users start it, on 2 ranks under a timeout (issue 17, bugs 1, 2, 3 and 5).

Each test launches ``mpiexec -n 2 python -m mnframe ...`` with ``run_mpi``
(which kills the process group afterwards) and checks what a user sees and
what the run directory holds: the exit status, one message naming the key and
no traceback for a bad input, the log of a job that trained and its falling
loss, the final checkpoint and ``model.npz``, and the record of a run that a
refused resume must leave alone.
"""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 180
SMALL = [
    "model.n_units=16",
    "dataset.batch_size=20",
    "extensions=minimal",
    "extensions.log_report.interval=1",
    "extensions.log_report.unit=iteration",
]


def mnframe(*args, cwd):
    result = run_mpi(["-m", "mnframe", *args], n=2, timeout=TIMEOUT, cwd=str(cwd), env={"PYTHONPATH": str(REPO)})
    assert not result.timed_out, result.output[-4000:]
    return result


def trained(run_dir, iterations):
    """The job's log has one entry per iteration and its loss fell."""
    log = json.loads((Path(run_dir) / "log").read_text())
    assert [e["iteration"] for e in log] == list(range(1, iterations + 1))
    losses = [e["main/loss"] for e in log]
    assert np.mean(losses[-3:]) < np.mean(losses[:3]), losses
    return log


def clean_config_error(result, *needles):
    """Exit 2, one message (rank 0 prints it once, every rank agreed), no traceback."""
    out = result.output
    assert result.returncode == 2, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
    assert out.count("mnframe: configuration error") == 1, out[-4000:]
    assert "did not report it" not in out  # not a one-rank error that the guard had to abort
    for needle in needles:
        assert needle in out, (needle, out[-4000:])


# -- bug 1: a sweep under MPI goes on after a failed job ---------------------------


def test_sweep_reports_the_failed_job_and_trains_the_next(tmp_path):
    result = mnframe(
        "-m",
        "dataset.batch_size=-1,20",
        "trainer.stop=[8,iteration]",
        "optimizer.lr=0.01",
        *SMALL[:1],
        *SMALL[2:],
        "hydra.sweep.dir=sweep",
        cwd=tmp_path,
    )
    out = result.output
    assert result.returncode == 2, out[-4000:]  # as Hydra in one process: the sweep ran, a job failed
    assert "Traceback" not in out
    assert out.count("#0 (dataset.batch_size=-1") == 2  # its error, then the summary
    assert out.count("dataset.batch_size: Input should be greater than 0 (got -1)") == 1
    assert "1 of 2 sweep jobs failed: #0" in out
    failed, ok = tmp_path / "sweep" / "0", tmp_path / "sweep" / "1"
    assert sorted(p.name for p in failed.iterdir()) == [".mnframe.lock", "FAILED.txt"]  # not a bare .hydra/
    assert "dataset.batch_size" in (failed / "FAILED.txt").read_text()
    trained(ok, 8)
    assert (ok / "config.yaml").exists() and (ok / ".hydra" / "overrides.yaml").exists()


# -- bug 2: short runs save a checkpoint and the model ----------------------------------


def _manifest(run_dir, iteration):
    return json.loads((run_dir / "checkpoints" / f"iter_{iteration:08d}" / "manifest.json").read_text())


@pytest.mark.smoke  # the fast tier's job-level check
def test_short_run_checkpoints_its_end_and_exports_the_model(tmp_path):
    result = mnframe(
        *SMALL,
        "trainer.stop=[27,iteration]",
        "checkpoint.interval=25",
        "optimizer.lr=0.01",
        "hydra.run.dir=run",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.output[-4000:]
    run_dir = tmp_path / "run"
    trained(run_dir, 27)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["iter_00000025", "iter_00000027"]
    assert _manifest(run_dir, 27)["reason"] == "final"
    # model.npz holds the trained MLP (not the Classifier around it): the checkpoint's parameters
    with (
        np.load(run_dir / "model.npz") as exported,
        np.load(run_dir / "checkpoints" / "iter_00000027" / "rank_00000.npz") as ckpt,
    ):
        assert sorted(exported.files) == sorted(f"{layer}/{p}" for layer in ("l1", "l2", "l3") for p in "Wb")
        for key in exported.files:
            np.testing.assert_array_equal(exported[key], ckpt[f"updater/model:main/predictor/{key}"])
    # the snippet of docs/lifecycle.md loads it
    snippet = readme_load_snippet().replace("runs/mnist/2026-01-01_12-00-00", str(run_dir))
    snippet = snippet.replace("n_units=1000", "n_units=16")
    scope = {}
    exec(compile(snippet, "docs/lifecycle.md", "exec"), scope)
    assert scope["accuracy"] > 0.3  # 27 iterations of 40 digits: well above chance (0.1)


def test_stop_at_an_interval_writes_no_second_checkpoint(tmp_path):
    result = mnframe(
        *SMALL,
        "trainer.stop=[8,iteration]",
        "checkpoint.interval=4",
        "optimizer.lr=0.01",
        "hydra.run.dir=run",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.output[-4000:]
    run_dir = tmp_path / "run"
    trained(run_dir, 8)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["iter_00000004", "iter_00000008"]
    assert _manifest(run_dir, 8)["reason"] == "interval"  # the interval's save, not a final re-save
    assert (run_dir / "model.npz").exists()


def readme_load_snippet():
    text = (REPO / "docs" / "lifecycle.md").read_text()
    section = text.split("## What a run leaves behind", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


# -- bug 3: a refused resume leaves the run's record alone --------------------------


def test_refused_resume_keeps_config_and_overrides(tmp_path):
    first = mnframe(*SMALL, "trainer.stop=[8,iteration]", "optimizer.lr=0.01", "hydra.run.dir=run", cwd=tmp_path)
    assert first.returncode == 0, first.output[-4000:]
    run_dir = tmp_path / "run"
    record = {p: (run_dir / p).read_text() for p in ("config.yaml", ".hydra/overrides.yaml", ".hydra/config.yaml")}
    assert "dataset.batch_size=20" in record[".hydra/overrides.yaml"]

    refused = mnframe(
        *SMALL[:1],
        "dataset.batch_size=25",
        *SMALL[2:],
        "trainer.stop=[12,iteration]",
        "optimizer.lr=0.01",
        "hydra.run.dir=run",
        cwd=tmp_path,
    )
    clean_config_error(refused, "Refusing to resume: dataset.batch_size changed")
    assert {p: (run_dir / p).read_text() for p in record} == record
    assert not (run_dir / "FAILED.txt").exists()  # the directory still describes its checkpoints
    trained(run_dir, 8)  # the first run's log is untouched


# -- bug 5: bad inputs get one clean message ------------------------------------------

BAD_INPUTS = {
    "missing_data": (
        ["dataset=mnist", "dataset.source.path=/nonexistent"],
        ["dataset.source.path:", "no MNIST data at '/nonexistent'"],
    ),
    "imagenet_without_lists": (
        ["recipe=imagenet"],
        ["dataset.source.train, dataset.source.val:", "set synthetic=true"],
    ),
    "negative_size": (
        ["model.n_units=-5"],
        ["model: mnframe.recipes.mnist.model.MLP(n_units=-5, n_out=10) failed", "negative dimensions"],
    ),
    "unknown_checkpoint": (
        ["checkpoint.load=iter_99999999"],
        ["checkpoint.load: checkpoint 'iter_99999999' is not in", "available: none"],
    ),
    "unwritable_run_dir": (
        ["hydra.run.dir=afile/run"],
        ["hydra.run.dir: cannot write the run directory", "Not a directory"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_gets_one_clean_message(tmp_path, case):
    overrides, needles = BAD_INPUTS[case]
    (tmp_path / "afile").write_text("a file, not a directory")
    if not any(o.startswith("hydra.run.dir") for o in overrides):
        overrides = [*overrides, "hydra.run.dir=run"]
    result = mnframe(*overrides, "extensions=minimal", cwd=tmp_path)
    clean_config_error(result, *needles)
    run_dir = tmp_path / "run"
    if run_dir.exists():  # a job that failed before training says why
        assert sorted(p.name for p in run_dir.iterdir()) == [".mnframe.lock", "FAILED.txt"]  # the (free) lock
        assert needles[0] in (run_dir / "FAILED.txt").read_text()
