"""mnframe doctor: its checks on fake MPI modules, and one real run."""

import subprocess
import sys

from mnframe.commands import doctor


class FakeComm:
    def __init__(self, size):
        self.size = size

    def Get_size(self):
        return self.size


class FakeMPI:
    def __init__(self, size, lib="MPICH Version: 4.1"):
        self.COMM_WORLD = FakeComm(size)
        self.lib = lib

    def Get_library_version(self):
        return self.lib


def test_every_rank_prints_0_is_detected(monkeypatch):
    for var in doctor.LAUNCHER_SIZE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    [result] = doctor.check_world(FakeMPI(1))
    assert result.status == "FAIL" and "every rank prints 0" in result.detail
    assert "mpi4py" in result.fix


def test_world_size_passes_when_launcher_agrees(monkeypatch):
    for var in doctor.LAUNCHER_SIZE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PMI_SIZE", "2")
    [result] = doctor.check_world(FakeMPI(2))
    assert result.status == "PASS"


def test_vendor_mismatch_names_the_fix(monkeypatch, tmp_path):
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\necho 'mpiexec (OpenRTE) 4.1.2 Open MPI'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(doctor.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setitem(sys.modules, "mpi4py", type(sys)("mpi4py"))
    sys.modules["mpi4py"].__version__ = "x"

    class MPI(FakeMPI):
        def Get_version(self):
            return (4, 0)

    results = doctor.check_mpi_library(MPI(1))
    assert results[-1].status == "FAIL" and "rebuild" in results[-1].fix


def test_doctor_runs():
    r = subprocess.run([sys.executable, "-m", "mnframe", "doctor"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[PASS] mpiexec matches" in r.stdout


OPENRTE = "mpiexec (OpenRTE) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n"
HYDRA = "HYDRA build details:\n    Version:                                 4.0.2\n    Process Manager:     pmi\n"
OMPI_LIB = "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022"
MPICH_LIB = "MPICH Version:\t4.0.2\nMPICH Release date:\tThu Apr  7 12:34:45 CDT 2022\n"


def test_open_mpi_launcher_is_named_and_compared():
    """Issue 42: Open MPI's `mpiexec (OpenRTE)` was "unknown" and passed beside an MPICH build."""
    result = doctor.compare_launcher("/usr/bin/mpiexec", OPENRTE, MPICH_LIB)
    assert result.status == "FAIL"
    assert "is Open MPI's mpiexec (OpenRTE/PRRTE) 4.1.4; mpi4py links MPICH 4.0.2" in result.detail
    assert "--no-cache-dir --no-binary=mpi4py" in result.fix
    assert doctor.compare_launcher("/usr/bin/mpiexec", OPENRTE, OMPI_LIB).status == "PASS"


def test_hydra_against_each_library():
    assert doctor.compare_launcher("mpiexec", HYDRA, MPICH_LIB).status == "PASS"
    assert doctor.compare_launcher("mpiexec", HYDRA, OMPI_LIB).status == "FAIL"
    other = doctor.compare_launcher("mpiexec", HYDRA, "MPICH Version:      5.0.2\n")
    assert other.status == "INFO" and "same family" in other.detail  # Hydra 4.0 starts MPICH 5 ranks
    major = doctor.compare_launcher("mpiexec", "mpiexec (Open MPI) 5.0.3\n", OMPI_LIB)
    assert major.status == "FAIL"  # Open MPI 5's launcher cannot start Open MPI 4's ranks


def test_srun_and_unknown_launchers_are_not_passed_silently():
    srun = doctor.compare_launcher("/usr/bin/mpiexec", "slurm 22.05.8\n", OMPI_LIB)
    assert srun.status == "INFO" and "Slurm's srun 22.05.8" in srun.detail and "--mpi=pmix" in srun.fix
    unknown = doctor.compare_launcher("/opt/x/mpiexec", "frobnicate 1.0\n", OMPI_LIB)
    assert unknown.status == "INFO" and "cannot tell" in unknown.detail
