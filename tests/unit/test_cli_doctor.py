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
