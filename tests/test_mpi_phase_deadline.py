"""MPI's own start and end have a deadline (mnframe/runtime/mpi_phase_watch.py, issue 39 item 1).

``MPI_Init`` (under srun also Slurm's PMI exchange) and what follows the exit barrier
(``MPI_Finalize``) hold the GIL, so the collective deadline cannot see them: a watcher process
outside MPI ends a rank stuck there with one line. Two ranks under mpiexec; every job runs under a
timeout (run_mpi kills its group).
"""

import re
import textwrap
import time

import pytest

from mnframe.testing import run_mpi

PHASE_LINE = "mnframe: MPI's {} ({}) has not finished after 3 s on task {} on host"

# rank 1 reaches MPI_Init 40 s late: rank 0 waits in MPI_Init (hydra's PMI barrier) meanwhile
LATE_START = textwrap.dedent("""
    import os, time
    import mnframe
    if os.environ["PMI_RANK"] == "1":
        time.sleep(40)
    from mpi4py import MPI
    print("started", MPI.COMM_WORLD.rank, flush=True)
""")

# after the exit barrier, rank 1 is stuck for 40 s (an exit handler that runs after mnframe's,
# standing for an MPI_Finalize that never returns); its result was written before. Rank 0's
# MPI_Finalize waits for rank 1 meanwhile, so it is stuck in MPI's end as well
STUCK_END = textwrap.dedent("""
    import atexit, os, time
    import numpy as np
    import mnframe
    if os.environ["PMI_RANK"] == "1":
        atexit.register(time.sleep, 40)  # registered first: runs after mnframe's exit handler
    comm = mnframe.create_communicator("naive")
    total = comm.allreduce_obj(comm.rank + 1)
    print(f"rank {comm.rank} total {total}", flush=True)
""")

# a normal job: the watchers end with their ranks, silently
NORMAL = textwrap.dedent("""
    import os
    import mnframe
    comm = mnframe.create_communicator("naive")
    from mnframe.runtime import mpi_phase_watch
    pid = mpi_phase_watch._state["proc"]  # the watcher's pid
    total = comm.allreduce_obj(comm.rank + 1)
    print(f"rank {comm.rank} total {total} watcher {pid}\\n", end="", flush=True)
""")


def _state(pid):
    """A process's state letter (``Z``: exited, not yet reaped by whoever adopted it), or "gone"."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _job(tmp_path, program, **env):
    path = tmp_path / "job.py"
    path.write_text(program)
    start = time.monotonic()
    result = run_mpi([path], 2, timeout=90, env={"MNFRAME_MPI_START_TIMEOUT": "3", **env}, cwd=str(tmp_path))
    return result, time.monotonic() - start


def test_a_rank_stuck_in_mpi_init_is_ended_with_one_line(tmp_path):
    result, took = _job(tmp_path, LATE_START)
    assert not result.timed_out, result.output
    assert result.returncode != 0 and "started" not in result.stdout, result.output
    assert result.stderr.count(PHASE_LINE.format("start", "MPI_Init; under srun also Slurm's PMI exchange", 0)) == 1, (
        result.stderr
    )
    assert "MNFRAME_MPI_START_TIMEOUT" in result.stderr
    assert took < 30, f"took {took:.1f} s: the 3 s deadline did not end the wait for rank 1 (40 s late)"


def test_a_rank_stuck_after_the_exit_barrier_is_ended_with_one_line(tmp_path):
    result, took = _job(tmp_path, STUCK_END)
    assert not result.timed_out, result.output
    assert "rank 0 total 3" in result.stdout and "rank 1 total 3" in result.stdout, result.output
    # MPICH's MPI_Finalize waits for every rank on the machine, so rank 0 is stuck in MPI's end
    # too: both clocks started at the exit barrier and either watcher may fire first (the
    # launcher then ends the other rank). Each task says so at most once; at least one does.
    end = "MPI_Finalize and the process's exit, after every rank passed the exit barrier"
    counts = [result.stderr.count(PHASE_LINE.format("end", end, task)) for task in (0, 1)]
    assert max(counts) <= 1 and sum(counts) >= 1, result.stderr
    assert result.returncode != 0, result.output
    assert took < 30, f"took {took:.1f} s: rank 1's 40 s stall after the barrier was not cut at 3 s"


@pytest.mark.smoke
def test_a_normal_job_ends_its_watchers_and_prints_nothing_of_them(tmp_path):
    result, _ = _job(tmp_path, NORMAL, MNFRAME_MPI_START_TIMEOUT=None)
    assert result.returncode == 0, result.output
    assert "has not finished" not in result.output
    pids = [int(pid) for pid in re.findall(r"watcher (\d+)", result.stdout)]
    assert len(pids) == 2, result.output  # a launcher started 2 processes: each has its watcher
    time.sleep(0.5)
    for pid in pids:  # the pipe's end told each watcher its rank exited
        assert _state(pid) in ("gone", "Z", "X"), f"watcher {pid} outlived its rank: state {_state(pid)}"


def test_no_watcher_without_a_launcher_or_with_the_deadline_off(monkeypatch):
    from mnframe.runtime import mpi_phase_watch

    for key in ("PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS", "SLURM_STEP_ID", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK"):
        monkeypatch.delenv(key, raising=False)
    assert not mpi_phase_watch.wanted()  # plain python: one process, nothing to wait for
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setenv("MPI_LOCALNRANKS", "2")
    assert mpi_phase_watch.wanted()
    monkeypatch.setenv("MNFRAME_MPI_START_TIMEOUT", "0")
    assert not mpi_phase_watch.wanted()
