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
def test_the_trial_trains_the_old_defaults_model(tmp_path):
    # autotune=all: overlap is tried although the 2 ranks may share 2 cores (as with cores to spare)
    out, tuned = _job(tmp_path, "all", "optimizer.autotune=all")
    assert out.count("autotune: chose ") == 1, out[-4000:]  # rank 0 only, once
    assert "autotune: two_dimensional, no overlap" in out
    assert "autotune: two_dimensional, overlap, buckets of 1/4 of the model" in out
    old_out, old = _job(tmp_path, "old", "optimizer.autotune=false")
    assert "autotune: chose" not in old_out and "autotune: off (optimizer.autotune=false)" in old_out
    assert tuned == old


def test_the_default_tries_overlap_only_with_a_spare_core(tmp_path):
    from mnframe.runtime.threads import has_spare_core, usable_cpus

    out, _ = _job(tmp_path, "default")
    cpus = len(usable_cpus())
    if has_spare_core(cpus, 2):
        assert out.count("autotune: chose ") == 1, out[-4000:]
    else:  # one node, overlap ruled out: nothing left to try, said once
        line = f"autotune: off (no spare core for overlap's thread, 2 rank(s) on {cpus} CPUs of one machine"
        assert out.count(line) == 1 and "autotune: chose" not in out, out[-4000:]


def test_explicit_overlap_is_kept(tmp_path):
    out, _ = _job(tmp_path, "overlap", "optimizer.overlap=true")
    assert "autotune:" not in out, out[-4000:]  # one node, overlap set: nothing left to try
