"""Which MPI a text names (issue 42): library strings, ``mpiexec --version`` of every common launcher,
``srun --version`` and mpicc banners, as captured (Debian 12's Open MPI 4.1.4 and MPICH 4.0.2, the mpich
wheel) or as the vendors print them; the comparisons doctor and set-up make; the rebuild command."""

import shutil
import sys
import types

import pytest

from mnframe.runtime import mpi_library as ml

HYDRA_MPICH = (
    "HYDRA build details:\n    Version:                                 4.0.2\n"
    "    Release Date:                            Thu Apr  7 12:34:45 CDT 2022\n"
    "    Configure options:                       '--with-hwloc-prefix=/usr' '--with-device=ch4:ucx'\n"
    "    Process Manager:                         pmi\n"
)
TEXTS = [
    # libraries: MPI.Get_library_version()
    ("Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022", ml.OPEN_MPI, "4.1.4"),
    ("MPICH Version:\t4.0.2\nMPICH Release date:\tThu Apr  7 12:34:45 CDT 2022\nMPICH ABI:\t14:2:2", ml.MPICH, "4.0.2"),
    ("Intel(R) MPI Library 2021.10 for Linux* OS\n", ml.INTEL, "2021.10"),
    ("MVAPICH2 Version      :\t2.3.7\nMVAPICH2 Release date :\tWed March 02 2022\n", ml.MVAPICH, "2.3.7"),
    # launchers: mpiexec --version, srun --version
    (
        "mpiexec.openmpi (OpenRTE) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n",
        ml.OPEN_MPI,
        "4.1.4",
    ),
    ("mpiexec (Open MPI) 5.0.3\n\nReport bugs to https://www.open-mpi.org/community/help/\n", ml.OPEN_MPI, "5.0.3"),
    (HYDRA_MPICH, ml.MPICH, "4.0.2"),
    ("Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619 (id: c2e19c2f3e)\n", ml.INTEL, "2021.10"),
    (
        "HYDRA build details:\n    Version: 3.2.1\n    Configure options: '--prefix=/opt/mvapich2-2.3.7'\n",
        ml.MVAPICH,
        None,
    ),
    ("slurm 22.05.8\n", ml.SLURM, "22.05.8"),
    ("slurm-wlm 23.02.1\n", ml.SLURM, "23.02.1"),
    # compilers
    ("mpicc.openmpi: Open MPI 4.1.4 (Language: C)", ml.OPEN_MPI, "4.1.4"),
    ("mpicc for MPICH version 4.0.2\n", ml.MPICH, "4.0.2"),
    ("bash: mpiexec: command not found", ml.UNKNOWN, None),
]


@pytest.mark.parametrize("text, vendor, version", TEXTS)
def test_identify(text, vendor, version):
    assert ml.identify(text) == ml.MPIName(vendor, version)


@pytest.mark.parametrize(
    "text, name",
    [
        ("mpiexec (OpenRTE) 4.1.4\n", "Open MPI's mpiexec (OpenRTE/PRRTE) 4.1.4"),
        (HYDRA_MPICH, "MPICH's mpiexec (Hydra) 4.0.2"),
        ("Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 1\n", "Intel MPI's mpiexec (Hydra) 2021.10"),
        ("OSU MVAPICH2 2.3.7\n", "MVAPICH's launcher 2.3.7"),
        ("slurm 22.05.8\n", "Slurm's srun 22.05.8"),
        ("frobnicate 1.0\n", "an unknown launcher (frobnicate 1.0)"),
    ],
)
def test_every_common_launcher_is_named(text, name):
    assert ml.launcher_name(text) == name


def test_same_mpi_and_family():
    ompi4, ompi5 = ml.MPIName(ml.OPEN_MPI, "4.1.4"), ml.MPIName(ml.OPEN_MPI, "5.0.3")
    mpich, intel = ml.MPIName(ml.MPICH, "4.0.2"), ml.MPIName(ml.INTEL, "2021.10")
    assert ml.same_mpi(ompi4, ompi4) and not ml.same_mpi(ompi4, ompi5) and not ml.same_mpi(ompi4, mpich)
    assert ml.same_mpi(ml.MPIName(ml.MPICH, None), mpich)  # a text without a version: the vendor decides
    assert ml.same_family(ompi4, mpich) is False and ml.same_family(mpich, ompi4) is False
    assert ml.same_family(mpich, intel) is True  # Hydra speaks PMI to the whole MPICH family
    assert ml.same_family(ml.MPIName(ml.SLURM, "22.05"), mpich) is None
    assert ml.same_family(ml.MPIName(ml.UNKNOWN, None), mpich) is None


def test_rebuild_command_bypasses_the_wheel_cache():
    command = ml.rebuild_command("/usr/bin/mpicc.mpich", "/v/bin/python")
    assert command == (
        "MPICC=/usr/bin/mpicc.mpich /v/bin/python -m pip install --no-cache-dir --no-binary=mpi4py "
        "--force-reinstall --no-deps mpi4py"
    )


@pytest.fixture
def source_build(monkeypatch):
    monkeypatch.setattr(ml, "abi_dispatching", lambda: False)


@pytest.mark.usefixtures("source_build")
def test_check_build_names_both_and_the_command(monkeypatch):
    monkeypatch.setattr(ml, "mpi4py_library", lambda: "Open MPI v4.1.4, package: Debian OpenMPI")
    monkeypatch.setattr(ml, "mpicc_library", lambda _mpicc: "MPICH Version:\t4.0.2\n")
    line = ml.check_build("/usr/bin/mpicc")
    assert line.startswith("mpi4py links Open MPI 4.1.4 but /usr/bin/mpicc builds against MPICH 4.0.2")
    assert "MPICC=/usr/bin/mpicc " in line and "--no-cache-dir" in line and "\n" not in line
    monkeypatch.setattr(ml, "mpicc_library", lambda _mpicc: "Open MPI v4.1.4, package: x")
    assert ml.check_build("/usr/bin/mpicc") is None


def test_check_build_refuses_a_binary_wheel(monkeypatch):
    import importlib.machinery

    ext = importlib.machinery.EXTENSION_SUFFIXES[0]
    monkeypatch.setattr(ml, "mpi4py_library", lambda: "Open MPI v4.1.4, package: Debian OpenMPI")
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", types.SimpleNamespace(__file__=f"/v/mpi4py/MPI{ext}"))
    assert not ml.abi_dispatching()  # one module: built against one MPI
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", types.SimpleNamespace(__file__=f"/v/mpi4py/MPI.mpich{ext}"))
    assert ml.abi_dispatching()  # PyPI's wheel: one module per MPI ABI, chosen at run time
    line = ml.check_build("/usr/bin/mpicc")
    assert line.startswith("mpi4py is a binary wheel") and "--no-binary=mpi4py" in line


@pytest.mark.usefixtures("source_build")
def test_check_build_without_a_working_mpicc(tmp_path):
    line = ml.check_build(str(tmp_path / "no-mpicc"))
    assert "cannot compile an MPI program with" in line and "libopenmpi-dev or libmpich-dev" in line


@pytest.mark.skipif(
    not shutil.which("mpicc"), reason="no mpicc on PATH (apt-get install libmpich-dev or libopenmpi-dev)"
)
def test_mpicc_probe_reads_the_library_it_links():
    assert ml.identify(ml.mpicc_library(shutil.which("mpicc"))).vendor in (ml.OPEN_MPI, ml.MPICH, ml.INTEL, ml.MVAPICH)
