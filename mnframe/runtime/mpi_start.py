"""What ``import mnframe`` arranges around MPI's start, for the runner and the drop-in path alike.

``install()`` (called by ``mnframe/__init__``, so by ``python -m mnframe``, ``import mnframe as
chainermn``, ``import chainermn`` through the alias and ``python -m mnframe.compat``):

* before MPI starts, the launcher defaults (runtime/slurm.py: ``MPIR_CVAR_CH4_NETMOD=ofi``
  under srun with the mpich wheel);
* as MPI starts, the launcher/MPI verdict (runtime/launcher_env.py: exit 3 with one line when
  the launcher started N > 1 processes but MPI's world has 1). A finder first on
  ``sys.meta_path`` wraps the loader of ``mpi4py.MPI`` (whose import runs ``MPI_Init``) and
  checks once the module has executed, whoever imports it: before any training or run
  directory. ``verify()`` is the same check for code that starts MPI later
  (``mpi4py.rc.initialize = False``); ``create_communicator`` and the runner call it.

When a script imports ``mpi4py.MPI`` before mnframe, MPI has already started: the defaults come
too late (one line on rank 0 says so where one would have been set: export it, or import
mnframe first) and the verdict runs at ``import mnframe``. A multiprocessing child (a data
loader worker) inherits the launcher's variables but is no MPI rank: it is never checked.
``report_only()`` turns the verdict off for ``doctor``, which reports the mismatch itself.
"""

import importlib.abc
import os
import sys
import warnings

from mnframe.runtime import mpi_phase_watch, slurm

MODULE = "mpi4py.MPI"
_state = {"verified": False, "report_only": False}


def report_only() -> None:
    _state["report_only"] = True


def _child_process() -> bool:
    """A multiprocessing child (spawn, forkserver), also while it imports the parent's main module."""
    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return False
    me = mp.current_process()
    return mp.parent_process() is not None or getattr(me, "_inheriting", False) or me.name != "MainProcess"


def verify() -> None:
    """Once MPI runs: the launcher/MPI verdict (exit 3 on a mismatch); once per process."""
    mpi = sys.modules.get(MODULE)
    if _state["verified"] or _state["report_only"] or mpi is None or _child_process():
        return
    if not mpi.Is_initialized() or mpi.Is_finalized():
        return
    _state["verified"] = True
    from mnframe.runtime import launcher_env

    launcher_env.check_world(mpi.COMM_WORLD)


class _CheckAfterExec(importlib.abc.Loader):
    """``mpi4py.MPI``'s own loader, then ``verify()``."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        if not _child_process():
            mpi_phase_watch.arm_start()  # MPI_Init holds the GIL: a process outside keeps its deadline
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self.loader.exec_module(module)
        finally:
            mpi_phase_watch.started()
        sys.modules.setdefault(MODULE, module)
        verify()  # on a mismatch it exits: mpi4py's own warning about it is not repeated beside the line
        for w in caught:  # no mismatch: what mpi4py warned, through the filters in force
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

    def __getattr__(self, name):  # get_filename, is_package, ... of the wrapped loader
        return getattr(self.loader, name)


class MPIStartFinder(importlib.abc.MetaPathFinder):
    """Finds ``mpi4py.MPI`` through the finders after it and wraps the loader."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != MODULE:
            return None
        finders = sys.meta_path[sys.meta_path.index(self) + 1 :] if self in sys.meta_path else sys.meta_path
        for finder in finders:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None and not isinstance(spec.loader, _CheckAfterExec):
                    spec.loader = _CheckAfterExec(spec.loader)
                return spec
        return None


_finder = MPIStartFinder()


def install() -> None:
    """Defaults before MPI, the verdict as it starts (idempotent; see the module docstring)."""
    mpi = sys.modules.get(MODULE)
    if mpi is not None and mpi.Is_initialized():
        if slurm.wanted() and os.environ.get("SLURM_PROCID") == "0":
            sys.stderr.write(
                f"mnframe: mpi4py.MPI was imported before mnframe, so MPI started under srun without "
                f"{slurm.NETMOD}=ofi, which mnframe sets for the mpich wheel (runs can hang in MPI_Init "
                f"or later): export {slurm.NETMOD}=ofi FI_PROVIDER=tcp, or import mnframe first\n"
            )
        verify()
        return
    slurm.prepare()
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
