"""What the launcher's environment says about this job, and the verdict when MPI's world disagrees.

``read(environ)`` names the launcher that started this process and how many processes it started,
from the variables it exports (checked on Open MPI 4.1 and MPICH 4.0 here; the others from their
documentation):

* Open MPI's mpirun: ``OMPI_COMM_WORLD_SIZE`` (its PMIx exports ``PMIX_RANK`` but no size);
* a Hydra mpiexec (MPICH, Intel MPI, MVAPICH): ``PMI_SIZE`` and ``MPI_LOCALNRANKS``;
* MVAPICH's mpirun_rsh: ``MV2_COMM_WORLD_SIZE``;
* srun: ``PMI_SIZE`` with ``--mpi=pmi2``, ``PMIX_RANK`` with ``--mpi=pmix``, and Slurm's task
  count (``SLURM_STEP_NUM_TASKS``, ``SLURM_NTASKS``, ``SLURM_NPROCS``), read only inside a job
  step (``SLURM_STEP_ID``): inside sbatch without srun the task count is the allocation's, not
  this launch's. An MPI launcher's own variables win over Slurm's: mpirun inside an allocation
  runs its daemons as a step of as many tasks as nodes.

A rank (``PMI_RANK``, ``PMIX_RANK``) proves at least rank + 1 processes. ``mismatch(world_size)``
is the one line when the launcher started N > 1 processes but MPI's world has 1: mpi4py links
another MPI than the launcher's (every process trains alone as rank 0 of 1), or srun started
tasks with no PMI between them. ``check_world(world)`` ends the process with status 3 on that
line (printed by the launcher's rank 0 only, so the job shows it once); the runner and the
drop-in path call it as soon as MPI has started (mnframe.runtime.mpi_start), before any
training or run-directory lock.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Mapping, Optional

from mnframe.runtime import mpi_library

SLURM_TASK_VARS = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
# every variable read() looks at (doctor lists the ones present)
SIZE_VARS = (
    "OMPI_COMM_WORLD_SIZE",
    "MV2_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "MPI_LOCALNRANKS",
    "PMIX_SIZE",
    "PMI_RANK",
    "PMIX_RANK",
    *SLURM_TASK_VARS,
)
RANK_VARS = ("OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")


@dataclass(frozen=True)
class Launch:
    launcher: str  # who started this process, in words
    family: str  # mpi_library vendor whose processes it starts (SLURM: any, through its PMI plugin)
    size: int  # processes it started (at least)
    evidence: str  # "OMPI_COMM_WORLD_SIZE=2"
    pmi: bool = True  # False: srun without any PMI (--mpi=none)


def _int(environ: Mapping[str, str], key: str) -> Optional[int]:
    try:
        return int(environ[key])
    except (KeyError, ValueError):
        return None


def _evidence(environ, keys):
    present = [k for k in keys if k in environ]
    return present, ", ".join(f"{k}={environ[k]}" for k in present)


def _size(environ, sizes=(), ranks=()):
    found = [v for v in (_int(environ, k) for k in sizes) if v is not None]
    found += [v + 1 for v in (_int(environ, k) for k in ranks) if v is not None]
    return max(found, default=1)


def read(environ: Mapping[str, str] = os.environ) -> Optional[Launch]:
    """The launch this process belongs to, from ``environ``; None when no launcher is seen."""
    in_step = "SLURM_STEP_ID" in environ
    if "OMPI_COMM_WORLD_SIZE" in environ:
        keys = ("OMPI_COMM_WORLD_SIZE",)
        return Launch(
            "Open MPI's mpirun",
            mpi_library.OPEN_MPI,
            _size(environ, keys, ("OMPI_COMM_WORLD_RANK",)),
            _evidence(environ, keys)[1],
        )
    if "MV2_COMM_WORLD_SIZE" in environ:
        keys = ("MV2_COMM_WORLD_SIZE",)
        return Launch("MVAPICH's mpirun_rsh", mpi_library.MVAPICH, _size(environ, keys), _evidence(environ, keys)[1])
    if "PMI_SIZE" in environ or "MPI_LOCALNRANKS" in environ or "PMI_RANK" in environ:
        _, evidence = _evidence(environ, ("PMI_SIZE", "MPI_LOCALNRANKS"))
        size = _size(environ, ("PMI_SIZE", "MPI_LOCALNRANKS"), ("PMI_RANK",))
        if in_step and "MPI_LOCALNRANKS" not in environ:
            return Launch("srun (PMI)", mpi_library.SLURM, size, evidence or f"PMI_RANK={environ['PMI_RANK']}")
        return Launch("a Hydra mpiexec (MPICH's)", mpi_library.MPICH, size, evidence)
    if "PMIX_RANK" in environ or "PMIX_SIZE" in environ:
        keys = ("PMIX_SIZE", *(SLURM_TASK_VARS if in_step else ()))
        size = _size(environ, keys, ("PMIX_RANK",))
        evidence = _evidence(environ, (*keys, "PMIX_RANK"))[1]
        if in_step:
            return Launch("srun (PMIx)", mpi_library.SLURM, size, evidence)
        return Launch("a PMIx launcher (Open MPI's prterun)", mpi_library.OPEN_MPI, size, evidence)
    if in_step:
        present, evidence = _evidence(environ, SLURM_TASK_VARS)
        return Launch("srun", mpi_library.SLURM, _size(environ, present[:1]), evidence, pmi=False)
    return None


def launcher_rank(environ: Mapping[str, str] = os.environ) -> int:
    """This process's rank as the launcher numbered it (0 when none says)."""
    for key in RANK_VARS:
        value = _int(environ, key)
        if value is not None:
            return value
    return 0


def _library() -> mpi_library.MPIName:
    try:
        return mpi_library.identify(mpi_library.mpi4py_library())
    except Exception:
        return mpi_library.MPIName(mpi_library.UNKNOWN, None)


def _own_mpiexec(library) -> str:
    """`` (path)`` of the mpich wheel's mpiexec when mpi4py links MPICH and the wheel is here, else ''."""
    from mnframe.runtime import slurm

    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    wheel = library.vendor == mpi_library.MPICH and os.path.exists(beside) and slurm.has_mpich_wheel()
    return f" ({beside})" if wheel else ""


def problem(world_size: int, environ: Mapping[str, str] = os.environ, library=None):
    """``(what is wrong, what to run)`` when the launcher started several processes but MPI's world
    has ``world_size`` 1; None otherwise. ``library``: mpi4py's MPI (an ``MPIName``; read when None)."""
    launch = read(environ)
    if launch is None or world_size != 1 or launch.size <= 1:
        return None
    if not launch.pmi:
        return (
            f"srun started {launch.size} tasks but MPI sees 1 rank in each: no PMI connects them (srun "
            f"--mpi=none, or a PMI this MPI does not speak)",
            "Run `srun --mpi=pmi2 ...` with the mpich wheel (srun --mpi=list shows what Slurm has), or mpiexec "
            "inside the allocation (docs/multi_node.md)",
        )
    library = library or _library()
    if launch.family == mpi_library.SLURM:  # srun's PMI plugin, which this MPI does not connect to
        plugin = "pmix" if library.vendor == mpi_library.OPEN_MPI else "pmi2"
        return (
            f"{launch.launcher} started {launch.size} processes ({launch.evidence}) but MPI sees 1 rank in each: "
            f"mpi4py links {library}, which does not connect through this PMI, so every process would train alone",
            f"Run `srun --mpi={plugin} ...` if Slurm has it (srun --mpi=list), or the mpiexec of {library.vendor} "
            f"inside the allocation (docs/cluster_mpi.md)",
        )
    return (
        f"{launch.launcher} started {launch.size} processes ({launch.evidence}) but MPI sees 1 rank in each: "
        f"mpi4py links {library}, not the launcher's MPI, so every process would train alone",
        f"Start it with the mpiexec of {library.vendor}{_own_mpiexec(library)}, or rebuild mpi4py against the "
        f"launcher's MPI: {mpi_library.rebuild_command()} (docs/cluster_mpi.md)",
    )


def mismatch(world_size: int, environ: Mapping[str, str] = os.environ, library=None) -> Optional[str]:
    """``problem()`` as the one line the job prints, or None."""
    found = problem(world_size, environ, library)
    return None if found is None else f"{found[0]}. {found[1]}"


def check_world(world) -> None:
    """Exit 3 (environment) when the launcher's processes are not one MPI job; the line once."""
    message = mismatch(world.Get_size())
    if message is None:
        return
    from mnframe.runtime.errors import ExitStatus, say

    if launcher_rank() == 0:
        say(f"mnframe: environment problem: {message}")
    sys.exit(int(ExitStatus.ENVIRONMENT))
