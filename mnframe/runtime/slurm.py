"""Ranks started by ``srun`` (Slurm's own PMI) rather than by ``mpiexec``: what mnframe sets and checks.

``prepare()`` runs before MPI starts. Under ``srun`` with the ``mpich`` wheel's MPI it defaults
``MPIR_CVAR_CH4_NETMOD=ofi``: with the wheel's default netmod (UCX), MPICH publishes its long
UCX addresses as segmented PMI puts that Slurm's ``mpi/pmi2`` misreads ("value not properly
terminated in client request"), and jobs hang in ``MPI_Init`` or die there (measured on the
simulated cluster, docs/multi_node.md). OFI's tcp addresses are short: no segmented puts. A value
the user set is kept. ``check_world(world)`` runs once MPI started: when srun started several
tasks but MPI sees one (no PMI between them: ``srun --mpi=none``, or a PMI the MPI does not
speak), every task would train alone; it ends the job at once with one line saying what to run.
"""

import importlib.metadata
import os
import sys

NETMOD = "MPIR_CVAR_CH4_NETMOD"


def under_srun() -> bool:
    """Started by srun as an MPI rank of its own (not by mpiexec's proxies inside an allocation)."""
    return "SLURM_STEP_ID" in os.environ and "MPI_LOCALRANKID" not in os.environ and "PMI_RANK" in os.environ


def has_mpich_wheel() -> bool:
    try:
        importlib.metadata.distribution("mpich")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def prepare() -> None:
    """Before MPI_Init: under srun with the mpich wheel, default the netmod to OFI (see above)."""
    if under_srun() and NETMOD not in os.environ and has_mpich_wheel():
        os.environ[NETMOD] = "ofi"
        os.environ.setdefault("FI_PROVIDER", "tcp")
        if os.environ.get("SLURM_PROCID") == "0":
            sys.stderr.write(
                "mnframe: started by srun with the mpich wheel: using MPIR_CVAR_CH4_NETMOD=ofi (Slurm's pmi2 "
                "misreads UCX's segmented addresses; set MPIR_CVAR_CH4_NETMOD yourself to choose)\n"
            )


def tasks() -> int:
    for key in ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"):
        try:
            return int(os.environ[key])
        except (KeyError, ValueError):
            continue
    return 1


def mismatch(world_size: int):
    """One line when srun started several tasks but MPI sees ``world_size`` 1, else None."""
    if "SLURM_STEP_ID" not in os.environ or world_size != 1 or tasks() <= 1:
        return None
    return (
        f"srun started {tasks()} tasks but MPI sees 1 rank in each: no PMI connects them (srun --mpi=none, or a "
        f"PMI this MPI does not speak). Run `srun --mpi=pmi2 ...` with the mpich wheel (srun --mpi=list shows "
        f"what Slurm has), or mpiexec inside the allocation (docs/multi_node.md)"
    )


def check_world(world) -> None:
    """Exit 3 (environment) with one line on every task when srun's tasks are not one MPI job."""
    message = mismatch(world.Get_size())
    if message is not None:
        from mnframe.runtime.errors import ExitStatus

        if os.environ.get("SLURM_PROCID", "0") == "0":
            print(f"mnframe: environment problem: {message}", file=sys.stderr, flush=True)
        sys.exit(int(ExitStatus.ENVIRONMENT))
