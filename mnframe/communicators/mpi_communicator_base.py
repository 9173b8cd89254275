"""ChainerMN's module path ``chainermn.communicators.mpi_communicator_base``.

``MpiCommunicatorBase`` is mnframe's ``MpiCommunicator``, the class every communicator
name derives from (a subclass fills its ``reducers`` table, see mpi_communicator.py)."""

from mnframe.communicators._communication_utility import chunked_bcast_obj
from mnframe.communicators.mpi_communicator import MpiCommunicator as MpiCommunicatorBase

__all__ = ["MpiCommunicatorBase", "chunked_bcast_obj"]
