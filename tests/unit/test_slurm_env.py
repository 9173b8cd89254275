"""mnframe.runtime.slurm without MPI: when srun's ranks get the OFI netmod, and the one-line verdict
when srun's tasks are not one MPI job (issue 28; that verdict: test_launcher_env.py; the jobs
themselves: tests/test_multinode_slurm.py)."""

import os

import pytest

from mnframe.runtime import slurm

SRUN = {"SLURM_STEP_ID": "0", "PMI_RANK": "1", "SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2"}


@pytest.fixture
def env(monkeypatch):
    for key in [*SRUN, "MPI_LOCALRANKID", "MPIR_CVAR_CH4_NETMOD", "FI_PROVIDER", "SLURM_NTASKS"]:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(slurm, "has_mpich_wheel", lambda: True)
    return monkeypatch


def test_srun_with_the_wheel_gets_ofi(env):
    for key, value in SRUN.items():
        env.setenv(key, value)
    slurm.prepare()
    assert os.environ["MPIR_CVAR_CH4_NETMOD"] == "ofi" and os.environ["FI_PROVIDER"] == "tcp"


@pytest.mark.parametrize("case", ["user_choice", "mpiexec_proxy", "no_srun", "no_wheel"])
def test_netmod_left_alone(env, case):
    for key, value in SRUN.items():
        env.setenv(key, value)
    if case == "user_choice":
        env.setenv("MPIR_CVAR_CH4_NETMOD", "ucx")
    elif case == "mpiexec_proxy":  # hydra inside an allocation serves PMI itself
        env.setenv("MPI_LOCALRANKID", "0")
    elif case == "no_srun":
        env.delenv("SLURM_STEP_ID")
    else:
        env.setattr(slurm, "has_mpich_wheel", lambda: False)
    slurm.prepare()
    assert os.environ.get("MPIR_CVAR_CH4_NETMOD") == ("ucx" if case == "user_choice" else None)
