"""Object collectives for checkpointing, over an mnframe communicator or a raw mpi4py one.

Checkpoint code needs rank/size, an object broadcast, and an object allgather
(to share every rank's verdict so all ranks raise the same error). This is a
small view over ``mnframe.utils.collectives``, which accepts either kind of
communicator and records each call in the op log (so it has a deadline too).
"""
from mnframe.utils import collectives


class ObjComm:
    def __init__(self, comm):
        self.comm = comm
        mpi_comm = collectives.mpi_comm_of(comm)
        self.rank, self.size = mpi_comm.Get_rank(), mpi_comm.Get_size()

    def bcast(self, obj, root=0):
        return collectives.bcast_obj(self.comm, obj, root=root, name="checkpoint.bcast_obj")

    def allgather(self, obj):
        return collectives.allgather_obj(self.comm, obj, name="checkpoint.allgather_obj")

    def any(self, flag):
        """True on every rank if ``flag`` is true on some rank."""
        return not collectives.all_agree(self.comm, not flag, name="checkpoint.any")


def as_objcomm(comm):
    return comm if isinstance(comm, ObjComm) else ObjComm(comm)
