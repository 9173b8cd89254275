"""ChainerMN's module path ``chainermn.communicators.flat_communicator``: mnframe's ``FlatCommunicator``."""

from mnframe.communicators.flat import FlatCommunicator

__all__ = ["FlatCommunicator"]
