"""Ranks started by ``srun`` (Slurm's own PMI) rather than by ``mpiexec``: what mnframe sets and checks.

``prepare()`` runs before MPI starts. Under ``srun`` with the ``mpich`` wheel's MPI it defaults
``MPIR_CVAR_CH4_NETMOD=ofi``: with the wheel's default netmod (UCX), MPICH publishes its long
UCX addresses as segmented PMI puts that Slurm's ``mpi/pmi2`` misreads ("value not properly
terminated in client request"), and jobs hang in ``MPI_Init`` or die there (measured on the
simulated cluster, docs/multi_node.md). OFI's tcp addresses are short: no segmented puts. A value
the user set is kept. ``import mnframe`` calls it (mnframe.runtime.mpi_start), so the runner and
the drop-in path (``import mnframe as chainermn``, ``python -m mnframe.compat``) both get it. When
srun's tasks are not one MPI job: mnframe.runtime.launcher_env.
"""

import os
import sys

NETMOD = "MPIR_CVAR_CH4_NETMOD"


def under_srun() -> bool:
    """Started by srun as an MPI rank of its own (not by mpiexec's proxies inside an allocation)."""
    return "SLURM_STEP_ID" in os.environ and "MPI_LOCALRANKID" not in os.environ and "PMI_RANK" in os.environ


def has_mpich_wheel() -> bool:
    import importlib.metadata  # here: ``import mnframe`` imports this module

    try:
        importlib.metadata.distribution("mpich")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def wanted() -> bool:
    """Whether ``prepare()`` sets the netmod here: srun, the mpich wheel, no choice of the user's."""
    return under_srun() and NETMOD not in os.environ and has_mpich_wheel()


def prepare() -> None:
    """Before MPI_Init: under srun with the mpich wheel, default the netmod to OFI (see above)."""
    if wanted():
        os.environ[NETMOD] = "ofi"
        os.environ.setdefault("FI_PROVIDER", "tcp")
        if os.environ.get("SLURM_PROCID") == "0":
            sys.stderr.write(
                "mnframe: started by srun with the mpich wheel: using MPIR_CVAR_CH4_NETMOD=ofi (Slurm's pmi2 "
                "misreads UCX's segmented addresses; set MPIR_CVAR_CH4_NETMOD yourself to choose)\n"
            )
