"""A launcher/MPI mismatch stops the job at once (issue 42, item 2), through every door mnframe has.

The launcher's environment is faked (``OMPI_COMM_WORLD_SIZE=2``: Open MPI's mpirun said two processes)
around the venv's MPI, which then sees a world of 1, exactly what a venv built for one MPI sees under
another MPI's ``mpiexec``. The real launches, both ways with Debian's Open MPI and MPICH:
tests/test_system_mpi.py (MNFRAME_SYSTEM_MPI_TESTS=1).
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAUNCH = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"}
FIRST = "mnframe: environment problem: Open MPI's mpirun started 2 processes (OMPI_COMM_WORLD_SIZE=2)"


def _env(extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "MPI_LOCAL", "SLURM_", "MV2_"))}
    env.update(extra)
    env["PYTHONPATH"] = str(REPO)
    return env


def _run(args, tmp_path, extra=LAUNCH, timeout=180):
    return subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=_env(extra), capture_output=True, text=True, timeout=timeout
    )


def _one_line(proc, only=True):
    """Exit 3 and one line; ``only``: nothing else either (mpi4py's own multi-line warning about the
    mismatch is dropped, except where the program starts MPI itself, as with MPI.Init())."""
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    lines = lines if only else [line for line in lines if line.startswith("mnframe:")]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(FIRST) and "MPI sees 1 rank in each: mpi4py links MPICH" in lines[0], lines
    assert "--no-cache-dir --no-binary=mpi4py" in lines[0]


SCRIPT = """
import sys
{before}
import chainermn
comm = chainermn.create_communicator("naive")
open("trained", "w").write(str(comm.size))
"""


@pytest.mark.parametrize(
    "before",
    [
        "",
        "import mpi4py.MPI  # MPI starts before mnframe: the verdict comes at import chainermn",
        "import mpi4py\nmpi4py.rc.initialize = False\nfrom mpi4py import MPI\nMPI.Init()  # started by hand, later",
    ],
    ids=["plain", "mpi4py_first", "init_later"],
)
def test_chainermn_script_stops_before_training(tmp_path, before):
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT.format(before=before)))
    proc = _run(["-m", "mnframe.compat", "train.py"], tmp_path)
    _one_line(proc, only=before == "")
    assert not (tmp_path / "trained").exists()


@pytest.mark.slow
def test_import_mnframe_as_chainermn_and_the_runner_stop(tmp_path):
    proc = _run(["-c", "import mnframe as chainermn; chainermn.create_communicator(); open('trained', 'w')"], tmp_path)
    _one_line(proc)
    assert not (tmp_path / "trained").exists()
    proc = _run(["-m", "mnframe", "trainer.stop=[2,iteration]", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    _one_line(proc)
    assert not (tmp_path / "run").exists()  # before the run directory and its lock


@pytest.mark.slow
def test_doctor_reports_it_and_a_data_worker_is_not_checked(tmp_path):
    proc = _run(["-m", "mnframe", "doctor"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "[FAIL] world size: Open MPI's mpirun started 2 processes" in proc.stdout
    # a multiprocessing child inherits the launcher's variables but is no MPI rank
    child = textwrap.dedent(
        """
        import multiprocessing, os
        import mnframe
        from mpi4py import MPI

        def work(_):
            from mpi4py import MPI
            return MPI.COMM_WORLD.Get_size()

        if __name__ == "__main__":
            os.environ.update(OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_RANK="1")
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                print("child world", pool.map(work, [0])[0])
        """
    )
    (tmp_path / "pool.py").write_text(child)
    proc = _run(["pool.py"], tmp_path, extra={})
    assert proc.returncode == 0 and "child world 1" in proc.stdout, proc.stdout + proc.stderr
