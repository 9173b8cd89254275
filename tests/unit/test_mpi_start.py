"""What ``import mnframe`` arranges around MPI's start (issue 39 item 1, issue 42 item 2): the runner's
pre-MPI defaults on the drop-in path, the warning when mpi4py.MPI came first, and who is not checked.
The launches: tests/test_launcher_mismatch.py, tests/test_system_mpi.py, tests/test_multinode_slurm.py."""

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from mnframe.runtime import launcher_env, mpi_start, slurm

REPO = Path(__file__).resolve().parents[2]
SRUN = {"SLURM_STEP_ID": "0", "PMI_RANK": "0", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2"}
SHOW = "import os; print(os.environ.get('MPIR_CVAR_CH4_NETMOD'), os.environ.get('FI_PROVIDER'))"


def _clean_env(extra):
    drop = ("SLURM_", "PMI", "OMPI_", "MPI_LOCAL", "MPIR_CVAR", "FI_PROVIDER", "MV2_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**env, **extra, "PYTHONPATH": str(REPO)}


@pytest.mark.skipif(not slurm.has_mpich_wheel(), reason="the srun default is for the mpich wheel (not installed)")
@pytest.mark.parametrize(
    "args",
    [
        ["-c", f"import mnframe as chainermn; {SHOW}"],
        ["-m", "mnframe.compat", "-c", f"import chainermn; {SHOW}"],
    ],
    ids=["import_mnframe_as_chainermn", "compat_import_chainermn"],
)
def test_drop_in_path_gets_the_srun_netmod(args):
    """Under srun with the mpich wheel, before any MPI: the runner's default, said once on task 0."""
    proc = subprocess.run([sys.executable, *args], env=_clean_env(SRUN), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ofi", "tcp"]
    assert "using MPIR_CVAR_CH4_NETMOD=ofi" in proc.stderr
    mine = subprocess.run(
        [sys.executable, *args],
        env=_clean_env({**SRUN, "MPIR_CVAR_CH4_NETMOD": "ucx"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert mine.stdout.split()[0] == "ucx"  # the user's choice is kept


class _FakeMPI(types.ModuleType):
    def __init__(self, size=1):
        super().__init__("mpi4py.MPI")
        self.COMM_WORLD = types.SimpleNamespace(Get_size=lambda: size)

    def Is_initialized(self):
        return True

    def Is_finalized(self):
        return False


@pytest.fixture
def fresh(monkeypatch):
    for key in (*launcher_env.SIZE_VARS, *launcher_env.RANK_VARS, "SLURM_STEP_ID", slurm.NETMOD, "MPI_LOCALRANKID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(mpi_start, "_state", {"verified": False, "report_only": False})
    monkeypatch.setattr(slurm, "has_mpich_wheel", lambda: True)
    return monkeypatch


def test_mpi4py_first_under_srun_says_the_default_came_too_late(fresh, capsys):
    for key, value in SRUN.items():
        fresh.setenv(key, value)
    fresh.setitem(sys.modules, "mpi4py.MPI", _FakeMPI(size=2))
    mpi_start.install()
    err = capsys.readouterr().err
    assert "mpi4py.MPI was imported before mnframe" in err and "export MPIR_CVAR_CH4_NETMOD=ofi" in err
    assert slurm.NETMOD not in os.environ  # too late to set: MPI has started
    assert mpi_start._state["verified"]


def test_mpi4py_first_with_a_mismatch_stops_at_import(fresh):
    fresh.setenv("PMI_SIZE", "2")
    fresh.setenv("PMI_RANK", "1")
    fresh.setitem(sys.modules, "mpi4py.MPI", _FakeMPI(size=1))
    fresh.setattr(launcher_env, "_library", lambda: launcher_env.mpi_library.MPIName("Open MPI", "4.1.4"))
    with pytest.raises(SystemExit) as stop:
        mpi_start.install()
    assert stop.value.code == 3


def test_doctor_reports_instead(fresh):
    fresh.setenv("PMI_SIZE", "2")
    fresh.setitem(sys.modules, "mpi4py.MPI", _FakeMPI(size=1))
    mpi_start.report_only()
    mpi_start.verify()  # no exit: doctor's world-size step says it
    assert not mpi_start._state["verified"]
