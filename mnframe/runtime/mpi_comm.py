"""The one way to get the mpi4py communicator behind a communicator, and ``mpi4py.MPI`` itself.

Everything that talks MPI directly (the host collectives, scatter, preemption,
the watchdog's activation, the checkpoint's shuffle seeds) accepts a
mnframe/ChainerMN communicator or a raw mpi4py one and calls ``mpi_comm_of``.
``MPI`` is ``mpi4py.MPI`` imported on first use: importing ``mpi4py.MPI`` starts MPI, so the
communicator modules name it through this handle and can be imported (by the registry, when a
config is composed or checked with ``--check``) without MPI. Imports nothing, so every package may use it.
"""


def mpi_comm_of(comm):
    """The mpi4py communicator behind a mnframe communicator (``.mpi_comm``), or ``comm`` itself."""
    mpi_comm = getattr(comm, "mpi_comm", None)
    if mpi_comm is not None:
        return mpi_comm
    if hasattr(comm, "Allreduce") and hasattr(comm, "Get_rank"):
        return comm  # already an mpi4py communicator
    raise TypeError(
        f"expected a mnframe communicator (with .mpi_comm) or an mpi4py Comm, "
        f"got {type(comm).__name__}; create one with mnframe.create_communicator()"
    )


class _LazyMPI:
    """``mpi4py.MPI``, imported when an attribute is first read (each attribute is kept after)."""

    def __getattr__(self, name):
        from mpi4py import MPI as module

        value = getattr(module, name)
        setattr(self, name, value)
        return value


MPI = _LazyMPI()
