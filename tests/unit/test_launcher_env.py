"""The launcher/MPI verdict without MPI (issue 42): what each launcher's environment says about the job's
size, and the one line when MPI's world disagrees. The environments are what Open MPI 4.1.4's mpirun and
MPICH 4.0.2's Hydra export (captured with ``mpiexec -n 2 env`` on Debian 12), Slurm's, and MVAPICH's
documented ones. The launches themselves: tests/test_system_mpi.py."""

import pytest

from mnframe.runtime import launcher_env, mpi_library

OPEN_MPI_RANK1 = {
    "OMPI_COMM_WORLD_SIZE": "2",
    "OMPI_COMM_WORLD_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    "OMPI_UNIVERSE_SIZE": "2",
    "PMIX_RANK": "1",
    "PMIX_NAMESPACE": "1151467521",
}
HYDRA_RANK0 = {"PMI_SIZE": "2", "PMI_RANK": "0", "PMI_FD": "6", "MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "0"}
SRUN_PMI2 = {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "3", "PMI_RANK": "3", "PMI_SIZE": "4"}
SRUN_PMIX = {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "0", "PMIX_RANK": "0"}
SRUN_NONE = {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_NTASKS": "2", "SLURM_PROCID": "1"}
SBATCH_ONLY = {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "8", "SLURM_PROCID": "0"}  # the batch script: no step
MVAPICH = {"MV2_COMM_WORLD_SIZE": "3", "MV2_COMM_WORLD_RANK": "0"}


@pytest.mark.parametrize(
    "environ, launcher, size, evidence",
    [
        (OPEN_MPI_RANK1, "Open MPI's mpirun", 2, "OMPI_COMM_WORLD_SIZE=2"),
        (HYDRA_RANK0, "a Hydra mpiexec (MPICH's)", 2, "PMI_SIZE=2, MPI_LOCALNRANKS=2"),
        (SRUN_PMI2, "srun (PMI)", 4, "PMI_SIZE=4"),
        (SRUN_PMIX, "srun (PMIx)", 4, "SLURM_STEP_NUM_TASKS=4, PMIX_RANK=0"),
        (SRUN_NONE, "srun", 2, "SLURM_STEP_NUM_TASKS=2, SLURM_NTASKS=2"),
        (MVAPICH, "MVAPICH's mpirun_rsh", 3, "MV2_COMM_WORLD_SIZE=3"),
        ({"PMIX_RANK": "2"}, "a PMIx launcher (Open MPI's prterun)", 3, "PMIX_RANK=2"),  # a rank proves rank + 1
    ],
)
def test_each_launcher_is_read(environ, launcher, size, evidence):
    launch = launcher_env.read(environ)
    assert (launch.launcher, launch.size, launch.evidence) == (launcher, size, evidence)


def test_no_launcher_and_sbatch_without_srun_are_not_a_launch():
    assert launcher_env.read({}) is None
    assert launcher_env.read(SBATCH_ONLY) is None  # the allocation's task count is not this launch's


def test_mpirun_inside_an_allocation_wins_over_slurm():
    """Open MPI's mpirun runs its daemons as a step of one task per node: its own size is the job's."""
    environ = {**SRUN_NONE, "SLURM_STEP_NUM_TASKS": "4", "OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0"}
    assert launcher_env.read(environ).size == 1
    assert launcher_env.mismatch(1, environ) is None


def test_hydra_inside_an_allocation_is_hydra():
    environ = {**HYDRA_RANK0, "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2"}
    assert launcher_env.read(environ).launcher == "a Hydra mpiexec (MPICH's)"


def test_broken_values_are_ignored():
    assert launcher_env.read({"PMI_SIZE": "two", "PMI_RANK": "x"}).size == 1


@pytest.mark.parametrize("environ", [OPEN_MPI_RANK1, HYDRA_RANK0, MVAPICH])
def test_mismatch_names_both_mpis_and_the_rebuild(environ):
    library = mpi_library.MPIName(mpi_library.MPICH, "4.0.2")
    line = launcher_env.mismatch(1, environ, library)
    launch = launcher_env.read(environ)
    assert line.startswith(f"{launch.launcher} started {launch.size} processes ({launch.evidence})")
    assert "mpi4py links MPICH 4.0.2, not the launcher's MPI" in line
    assert "--no-cache-dir --no-binary=mpi4py --force-reinstall" in line and "\n" not in line
    assert launcher_env.mismatch(launch.size, environ, library) is None  # one MPI job: nothing to say


@pytest.mark.parametrize("environ, plugin", [(SRUN_PMI2, "pmix"), (SRUN_PMIX, "pmix")])
def test_srun_with_a_pmi_this_mpi_does_not_speak_names_the_plugin(environ, plugin):
    line = launcher_env.mismatch(1, environ, mpi_library.MPIName(mpi_library.OPEN_MPI, "4.1.4"))
    assert line.startswith(f"srun (PMI{'x' if environ is SRUN_PMIX else ''}) started 4 processes")
    assert "mpi4py links Open MPI 4.1.4, which does not connect through this PMI" in line
    assert f"srun --mpi={plugin}" in line
    mpich = launcher_env.mismatch(1, environ, mpi_library.MPIName(mpi_library.MPICH, "4.0.2"))
    assert "srun --mpi=pmi2" in mpich


def test_srun_without_pmi_keeps_its_own_line():
    line = launcher_env.mismatch(1, SRUN_NONE)
    assert "srun started 2 tasks but MPI sees 1 rank" in line and "--mpi=pmi2" in line


def test_one_process_is_never_a_mismatch():
    assert launcher_env.mismatch(1, {"PMI_SIZE": "1", "PMI_RANK": "0"}) is None
    assert launcher_env.mismatch(1, {**SRUN_NONE, "SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "1"}) is None


def test_the_launchers_rank_0_prints():
    assert launcher_env.launcher_rank(OPEN_MPI_RANK1) == 1
    assert launcher_env.launcher_rank(HYDRA_RANK0) == 0
    assert launcher_env.launcher_rank(SRUN_NONE) == 1
    assert launcher_env.launcher_rank({}) == 0


class _World:
    def __init__(self, size):
        self.size = size

    def Get_size(self):
        return self.size


def test_check_world_exits_3_with_one_line_on_rank_0(monkeypatch, capsys):
    for key in launcher_env.SIZE_VARS + launcher_env.RANK_VARS + ("SLURM_STEP_ID", "MPI_LOCALNRANKS"):
        monkeypatch.delenv(key, raising=False)
    for key, value in HYDRA_RANK0.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(launcher_env, "_library", lambda: mpi_library.MPIName(mpi_library.OPEN_MPI, "4.1.4"))
    with pytest.raises(SystemExit) as stop:
        launcher_env.check_world(_World(1))
    assert stop.value.code == 3
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("mnframe: environment problem: a Hydra mpiexec (MPICH's) started 2 processes")
    assert "mpi4py links Open MPI 4.1.4" in line
    monkeypatch.setenv("PMI_RANK", "1")
    with pytest.raises(SystemExit):
        launcher_env.check_world(_World(1))
    assert capsys.readouterr().err == ""  # the other ranks exit quietly: the job shows the line once
    launcher_env.check_world(_World(2))  # the same launch, one MPI job: nothing
