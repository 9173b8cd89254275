"""Sharp edges a new user hit (issue 38, items 8-11), as the user meets them: options that were
silently ignored or misreported are refused in one line; messages name what to fix. MPI jobs run
under ``run_mpi``'s timeout; ``--check`` runs without MPI, under a subprocess timeout."""

import subprocess
import sys
from pathlib import Path

import pytest

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 120


def mnframe(*args, cwd=REPO, env=None):
    return subprocess.run(
        [sys.executable, "-m", "mnframe", *args], cwd=cwd, timeout=TIMEOUT, capture_output=True, text=True, env=env
    )


def one_line(result, needle):
    """The single stderr line holding ``needle`` (said once, by rank 0), no traceback."""
    lines = [line for line in result.stderr.splitlines() if needle in line]
    assert len(lines) == 1, result.stderr[-3000:]
    assert "Traceback" not in getattr(result, "output", result.stderr)
    return lines[0]


# -- item 8: options silently ignored or misreported --------------------------------------------


@pytest.mark.parametrize("size", ["-1", "0"])
def test_check_refuses_a_world_size_below_1(size):
    r = mnframe("--check", "--world-size", size)
    assert r.returncode == 2, r.stderr
    line = one_line(r, "configuration error")
    assert f"--world-size must be a positive number of ranks (got {size})" in line
    assert "config OK" not in r.stdout and "the job has" not in r.stderr


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--world-size", "4"], "--world-size applies only to --check"),
        pytest.param(  # imports Optuna first (check_environment): slow
            ["tune=optuna"],
            "tune=optuna runs a search of several trials, which needs Hydra's multirun: add -m",
            marks=pytest.mark.slow,
        ),
    ],
    ids=["world_size_without_check", "tune_without_multirun"],
)
def test_an_option_that_would_be_ignored_is_refused_on_every_rank(tmp_path, args, needle):
    run_dir = tmp_path / "run"
    r = run_mpi(
        ["-m", "mnframe", *args, "trainer.stop=[1,iteration]", f"hydra.run.dir={run_dir}"],
        n=2,
        timeout=TIMEOUT,
        cwd=str(REPO),
    )
    assert not r.timed_out, r.output[-3000:]
    assert r.returncode == 2, r.output[-3000:]
    assert needle in one_line(r, "configuration error")
    assert not (run_dir / "config.yaml").exists() and not list(run_dir.glob("model*")), "a job ran"
