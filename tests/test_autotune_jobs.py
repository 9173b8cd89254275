"""optimizer.autotune in the runner (docs/autotune.md): a job that sets nothing runs the trial,
logs its choice once, and trains bitwise the model that the old default (autotune off) trains;
an explicit option is not overridden."""

from pathlib import Path

import numpy as np
import pytest

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent
ITERATIONS = 24  # the broadcast-only update, the trial (3 candidates on one node), and more
COMMON = [
    "recipe=mnist",
    "model.n_units=64",
    "dataset.batch_size=20",
    "extensions=minimal",
    f"trainer.stop=[{ITERATIONS},iteration]",
    "trainer.device=cpu",
    "resume=never",
]


def _job(tmp_path, name, *overrides):
    run_dir = tmp_path / name
    result = run_mpi(
        ["-m", "mnframe", *COMMON, f"hydra.run.dir={run_dir}", *overrides],
        n=2,
        timeout=180,
        cwd=str(tmp_path),
        env={"PYTHONPATH": str(REPO)},
    )
    assert not result.timed_out and result.returncode == 0, result.output[-4000:]
    with np.load(run_dir / "model.npz") as f:
        return result.output, {k: f[k].tobytes() for k in f.files}


@pytest.mark.smoke
def test_default_runs_the_trial_and_trains_the_old_defaults_model(tmp_path):
    out, tuned = _job(tmp_path, "default")
    assert out.count("autotune: chose ") == 1, out[-4000:]  # rank 0 only, once
    assert "autotune: two_dimensional, no overlap" in out
    old_out, old = _job(tmp_path, "old", "optimizer.autotune=false")
    assert "autotune: chose" not in old_out and "autotune: off (optimizer.autotune=false)" in old_out
    assert tuned == old


def test_explicit_overlap_is_kept(tmp_path):
    out, _ = _job(tmp_path, "overlap", "optimizer.overlap=true")
    assert "autotune:" not in out, out[-4000:]  # one node, overlap set: nothing left to try
