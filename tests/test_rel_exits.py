"""Issue 30 (every way a run ends is clean), the helper's half: a user's mistake at 8 ranks,
a busy run directory, out of memory, a failed save, a damaged checkpoint, ``--help``.

Every job runs under ``run_mpi`` with an outer timeout; each test asserts the exit
status and the one line the user gets (no traceback, no MPICH banner).
"""

import time
from pathlib import Path

import pytest

from mnframe.testing import run_mpi

REPO = Path(__file__).resolve().parent.parent
OUTER_TIMEOUT = 180
BANNER = "BAD TERMINATION"


def mnframe_job(*overrides, n=2, run_dir=None, timeout=OUTER_TIMEOUT, env=None, cwd=None):
    args = ["-m", "mnframe", *overrides]
    if run_dir is not None:
        args.append(f"hydra.run.dir={run_dir}")
    r = run_mpi(args, n=n, timeout=timeout, env={"PYTHONPATH": str(REPO), **(env or {})}, cwd=str(cwd or REPO))
    assert not r.timed_out, f"job hung past {timeout}s:\n{r.output[-4000:]}"
    return r


# -- 2. a user's mistake at 8 ranks on 2 cores: exit 2, all ranks together -----------------------

MISTAKES = [
    (["communicator=pure_nccl", "recipe=imagenet"], "communicator.name: this communicator needs a CUDA GPU"),
    (["optimizer.lrr=0.1"], "did you mean 'lr'?"),
]


def test_mistake_at_8_ranks_exits_2_without_the_mpich_banner_every_time(tmp_path):
    # 8 ranks on a 2-core machine, 5 times: before issue 30 about 3 runs in 7 ended with
    # MPICH's "BAD TERMINATION ... Killed (signal 9)" and status 9 (a rank gave up waiting
    # for the others after 5 s and aborted the job)
    for attempt in range(5):
        overrides, needle = MISTAKES[attempt % 2]
        r = mnframe_job(*overrides, "extensions=minimal", n=8, run_dir=tmp_path / f"run{attempt}")
        assert r.returncode == 2, f"attempt {attempt}: {r.output[-3000:]}"
        assert needle in r.output and r.output.count("configuration error") == 1, r.output[-3000:]
        assert BANNER not in r.output and "MPI_Abort" not in r.output and "Traceback" not in r.output


# -- 11. --help names mnframe and its own commands first; no stray Hydra line before an error ---


def test_help_names_mnframe_and_its_commands_first_and_no_stray_hydra_line(tmp_path):
    r = mnframe_job("--help", n=1)
    assert r.returncode == 0, r.output[-3000:]
    head = r.stdout.split("== Configuration groups ==")[0]
    assert head.startswith("mnframe") and "powered by Hydra" not in r.stdout
    for word in ("doctor", "--check", "--graph", "--world-size"):
        assert word in head, word
    assert "recipe: cifar" in r.stdout  # Hydra's help follows
    r = mnframe_job("optimizer.lrr=0.1", run_dir=tmp_path / "run")
    assert r.returncode == 2
    assert r.stderr.startswith("mnframe: configuration error:"), r.stderr[:500]
    assert "Error executing job" not in r.output
