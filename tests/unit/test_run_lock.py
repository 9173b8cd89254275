"""One job per run directory (issue 30): the lock, its holder record and the messages, in one process."""

import json
import os
import subprocess
import sys

from mnframe.runtime import run_lock


def test_a_held_directory_is_refused_naming_the_holder_and_released_at_the_end(tmp_path):
    assert run_lock.acquire(tmp_path) is None and run_lock.owns(tmp_path)
    holder = json.loads((tmp_path / run_lock.HOLDER_NAME).read_text())
    assert holder["pid"] == os.getpid()
    probe = "import sys; from mnframe.runtime import run_lock; print(run_lock.acquire(sys.argv[1]) or 'acquired')"
    other = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=60)
    line = other.stdout.strip()
    assert line.startswith(f"hydra.run.dir: {tmp_path} is in use by another mnframe job (host ")
    assert f"pid {os.getpid()}, started " in line
    run_lock.release(tmp_path)
    assert not (tmp_path / run_lock.HOLDER_NAME).exists() and not run_lock.owns(tmp_path)
    other = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert other.stdout.strip() == "acquired"


def test_a_sweep_job_reusing_an_earlier_jobs_directory_is_refused(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    assert run_lock.acquire(d) is None
    run_lock.release(d)
    problem = run_lock.acquire(d)
    assert problem.startswith(f"hydra.sweep.dir: {d} is the run directory of an earlier job of this sweep")
    assert "${hydra.job.num}" in problem


def test_a_dead_holders_record_is_named_when_a_child_still_holds_the_lock(tmp_path):
    (tmp_path / run_lock.HOLDER_NAME).write_text(
        json.dumps({"host": os.uname().nodename, "pid": 2**22 + 7, "started": "t"})
    )
    line = run_lock.busy_message(tmp_path)
    assert f"pid {2**22 + 7} no longer runs" in line and "data-loader worker" in line
