"""Issue 30 (every way a run ends is clean), the helper's half: a user's mistake at 8 ranks,
a busy run directory, out of memory, a failed save, a damaged checkpoint, ``--help``.

Every job runs under ``run_mpi`` with an outer timeout; each test asserts the exit
status and the one line the user gets (no traceback, no MPICH banner).
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mnframe.testing import mpiexec_path, run_mpi
from mnframe.testing.faults import FULL_DISK_RUNNER

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
    # 8 ranks on a 2-core machine, each mistake once: before issue 30 about 3 runs in 7 ended with
    # MPICH's "BAD TERMINATION ... Killed (signal 9)" and status 9 (a rank gave up waiting
    # for the others after 5 s and aborted the job). The cause has its own deterministic test below,
    # so two runs (not five) keep the 8-rank check at a quarter of the time.
    for attempt in range(2):
        overrides, needle = MISTAKES[attempt % 2]
        r = mnframe_job(*overrides, "extensions=minimal", n=8, run_dir=tmp_path / f"run{attempt}")
        assert r.returncode == 2, f"attempt {attempt}: {r.output[-3000:]}"
        assert needle in r.output and r.output.count("configuration error") == 1, r.output[-3000:]
        assert BANNER not in r.output and "MPI_Abort" not in r.output and "Traceback" not in r.output


LATE_EXIT_SCRIPT = """
import sys, time
from mpi4py import MPI
from mnframe.runtime import guard

rank = MPI.COMM_WORLD.Get_rank()
MPI.Finalize()
if rank == 0:  # still busy after MPI_Finalize when rank 1 has already left
    time.sleep(1.5)
    open(sys.argv[1], "w").write("rank 0 got to its own exit")
guard._exit_after_finalize(2)
"""


def test_a_rank_that_leaves_first_after_finalize_does_not_get_the_others_killed(tmp_path):
    # What made the 8-rank test above flaky in CI: MPICH tells mpiexec that a rank finalized from
    # a C exit handler, which os._exit skipped; mpiexec then took the first rank out as a crash
    # and SIGKILLed the ranks still finishing (status 9 and the banner, or rank 0's work lost).
    script, survived = tmp_path / "late_exit.py", tmp_path / "survived"
    script.write_text(LATE_EXIT_SCRIPT)
    r = run_mpi([script, survived], n=2, timeout=OUTER_TIMEOUT, env={"PYTHONPATH": str(REPO)}, cwd=str(tmp_path))
    assert not r.timed_out, r.output[-3000:]
    assert survived.exists(), f"rank 0 was killed before its own exit:\n{r.output[-3000:]}"
    assert r.returncode == 2 and BANNER not in r.output, r.output[-3000:]


# -- 11. --help names mnframe and its own commands first; no stray Hydra line before an error ---


def test_help_names_mnframe_and_its_commands_first_and_no_stray_hydra_line(tmp_path):
    r = mnframe_job("--help", n=1)
    assert r.returncode == 0, r.output[-3000:]
    head = r.stdout.split("== Configuration groups ==")[0]
    assert head.startswith("mnframe") and "powered by Hydra" not in r.stdout
    for word in ("doctor", "--check", "--graph", "--world-size"):
        assert word in head, word
    assert "recipe: cifar" in r.stdout  # Hydra's help follows
    r = mnframe_job("optimizer.lrr=0.1", n=1, run_dir=tmp_path / "run")  # Hydra runs on rank 0 only
    assert r.returncode == 2
    assert r.stderr.startswith("mnframe: configuration error:"), r.stderr[:500]
    assert "Error executing job" not in r.output


# -- 5. one job per run directory ---------------------------------------------------------------


def test_second_job_on_a_busy_run_directory_exits_2_and_a_dead_holder_blocks_nothing(tmp_path):
    run = tmp_path / "run"
    cmd = [mpiexec_path(), "-n", "1", sys.executable, "-m", "mnframe", "extensions=minimal"]
    a = subprocess.Popen(
        [*cmd, "trainer.stop=[100000,iteration]", f"hydra.run.dir={run}"],
        cwd=str(REPO),
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (run / "config.yaml").exists() and a.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (run / "config.yaml").exists() and a.poll() is None, "job A did not start"
        before = sorted(p.name for p in run.iterdir())
        start = time.monotonic()
        b = mnframe_job("seed=1", "extensions=minimal", "trainer.stop=[2,iteration]", run_dir=run)
        assert b.returncode == 2, b.output[-3000:]
        line = [x for x in b.output.splitlines() if "is in use by another mnframe job" in x]
        assert len(line) == 1 and str(run) in line[0] and "pid " in line[0] and "started " in line[0], b.output
        assert BANNER not in b.output and "Traceback" not in b.output
        assert time.monotonic() - start < 90
        assert not (run / "FAILED.txt").exists() and "seed: 0" in (run / "config.yaml").read_text()
        assert set(before) <= {p.name for p in run.iterdir()}
    finally:
        os.killpg(a.pid, signal.SIGKILL)  # job A dies: the kernel releases its lock
        a.communicate()
    c = mnframe_job("seed=1", "extensions=minimal", "trainer.stop=[2,iteration]", "resume=never", run_dir=run)
    assert c.returncode == 0, c.output[-3000:]
    assert "seed: 1" in (run / "config.yaml").read_text()


# -- 7. a failed save: one line, exit 1, the previous checkpoint kept ------------------------------

# FULL_DISK_RUNNER: the runner with a full disk on rank 1 from its second checkpoint on (ENOSPC
# injected where the checkpoint's file is written; no file system of the machine is filled).


def test_failed_save_is_one_line_exit_1_and_keeps_the_previous_checkpoint(tmp_path):
    script = tmp_path / "runner.py"
    script.write_text(FULL_DISK_RUNNER)
    run = tmp_path / "run"
    r = run_mpi(
        [script, "extensions=minimal", "trainer.stop=[4,iteration]", "checkpoint.interval=2", f"hydra.run.dir={run}"],
        n=2,
        timeout=OUTER_TIMEOUT,
        env={"PYTHONPATH": str(REPO)},
        cwd=str(REPO),
    )
    assert not r.timed_out, r.output[-3000:]
    assert r.returncode == 1, r.output[-3000:]
    lines = [x for x in r.stderr.splitlines() if x.startswith("mnframe: save failed:")]
    assert len(lines) == 1, r.stderr[-3000:]
    path = run / "checkpoints" / ".tmp-iter_00000004" / "rank_00001.npz"
    assert f"checkpoint iter_00000004 not written: rank 1 could not write {path} (" in lines[0]
    assert "needed): [Errno 28] No space left on device" in lines[0]
    assert f"the previous checkpoint {run / 'checkpoints' / 'iter_00000002'} is kept" in lines[0]
    assert "Traceback" not in r.output and BANNER not in r.output
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iter_00000002"]
    assert not (run / "model.npz").exists()


# -- 8. a damaged checkpoint is moved aside, never overwritten, not counted in keep --------------


def test_damaged_checkpoint_is_moved_aside_and_never_overwritten(tmp_path):
    run = tmp_path / "run"
    common = ["extensions=minimal", "checkpoint.interval=2", "checkpoint.keep=2"]
    r = mnframe_job(*common, "trainer.stop=[4,iteration]", run_dir=run)
    assert r.returncode == 0, r.output[-3000:]
    assert r.stderr.count("memory per rank: parameters ") == 2 and "optimizer state " in r.stderr  # item 6
    ckpts = run / "checkpoints"
    victim = ckpts / "iter_00000004" / "rank_00000.npz"
    half = victim.read_bytes()[: victim.stat().st_size // 2]
    victim.write_bytes(half)  # cut in half
    r = mnframe_job(*common, "trainer.stop=[6,iteration]", run_dir=run)
    assert r.returncode == 0, r.output[-3000:]
    moved = ckpts / "iter_00000004.damaged"
    assert f"{ckpts / 'iter_00000004'} is damaged (" in r.stderr and f"moved aside to {moved}" in r.stderr
    assert "falling back to the previous good checkpoint iter_00000002" in r.stderr
    # iteration 4 was reached again and written beside it; keep=2 counts iter_4 and iter_6 only
    assert sorted(p.name for p in ckpts.iterdir()) == ["iter_00000004", "iter_00000004.damaged", "iter_00000006"]
    assert (moved / "rank_00000.npz").read_bytes() == half
    assert "foreign entry" not in r.stderr


# -- 6. out of memory: one line on every rank, exit 1; SIGKILL by the kernel's OOM killer named ---


def test_out_of_memory_is_one_line_on_every_rank_naming_what_and_the_keys(tmp_path):
    # NumPy refuses the 373 GiB allocation at once: no memory of the machine is used
    r = mnframe_job("model.n_units=100000000000", "extensions=minimal", run_dir=tmp_path / "run")
    assert r.returncode == 1, r.output[-3000:]
    lines = [x for x in r.stderr.splitlines() if x.startswith("mnframe: out of memory on rank")]
    assert sorted(x.split(" on host")[0] for x in lines) == [
        "mnframe: out of memory on rank 0/2",
        "mnframe: out of memory on rank 1/2",
    ], r.stderr[-3000:]
    for line in lines:
        assert "allocating the model's parameters: 372.5 GiB (shape (100000000000,), float32)" in line
        assert "lower model.n_units=100000000000" in line
    assert "Traceback" not in r.output and BANNER not in r.output


OOM_KILLED_SCRIPT = r"""
import os, signal, sys, time
import mnframe.runtime.sentinel as sentinel

sentinel.OOM_COUNTER = sys.argv[1]  # a stand-in for /proc/vmstat
import numpy as np
import mnframe

comm = mnframe.create_communicator("naive")
comm.allreduce(np.ones(3, np.float32))
if comm.rank == 1:
    with open(sys.argv[1], "w") as f:
        f.write("oom_kill 8\n")  # the kernel counts one more out-of-memory kill ...
    os.kill(os.getpid(), signal.SIGKILL)  # ... as it kills this rank
time.sleep(60)
"""


def test_rank_killed_by_the_oom_killer_is_named(tmp_path):
    counter = tmp_path / "vmstat"
    counter.write_text("nr_free_pages 1\noom_kill 7\n")
    script = tmp_path / "oom_killed.py"
    script.write_text(OOM_KILLED_SCRIPT)
    r = run_mpi([script, counter], n=2, timeout=OUTER_TIMEOUT, env={"PYTHONPATH": str(REPO)}, cwd=str(tmp_path))
    assert not r.timed_out, r.output[-3000:]
    assert r.returncode == 9, r.output[-3000:]
    assert r.stderr.count("mnframe: rank 1 (pid ") == 1, r.output[-3000:]
    # "was killed by signal 9 (SIGKILL)" when its status is read before mpiexec reaps it
    assert "; the kernel's out-of-memory killer ran meanwhile (oom_kill in /proc/vmstat rose by 1)" in r.stderr
