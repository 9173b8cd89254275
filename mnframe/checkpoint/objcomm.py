"""Object collectives for checkpointing, over an mnframe communicator or a raw mpi4py one.

Checkpoint code needs three things: rank/size, broadcast an object, and
allgather objects (to share every rank's verdict so all ranks raise the same
error). mnframe communicators provide ``bcast_obj``/``gather_obj``; a bare
``mpi4py`` communicator (handy in tests and scripts) is wrapped in ``oplog.op``
here so its operations have deadlines too.
"""
from mnframe.runtime import oplog


class ObjComm:
    def __init__(self, comm):
        self.comm = comm
        self._chainermn = hasattr(comm, "bcast_obj") and hasattr(comm, "gather_obj")
        if self._chainermn:
            self.rank, self.size = comm.rank, comm.size
        else:
            self.rank, self.size = comm.Get_rank(), comm.Get_size()

    def bcast(self, obj, root=0):
        if self._chainermn:
            return self.comm.bcast_obj(obj, root=root)
        with oplog.op("checkpoint.bcast_obj"):
            return self.comm.bcast(obj, root=root)

    def allgather(self, obj):
        if self._chainermn:
            return self.comm.bcast_obj(self.comm.gather_obj(obj, root=0), root=0)
        with oplog.op("checkpoint.allgather_obj"):
            return self.comm.allgather(obj)

    def any(self, flag):
        """True on every rank if ``flag`` is true on some rank."""
        return any(self.allgather(bool(flag)))


def as_objcomm(comm):
    return comm if isinstance(comm, ObjComm) else ObjComm(comm)
