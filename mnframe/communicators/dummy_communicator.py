"""ChainerMN's module path ``chainermn.communicators.dummy_communicator``: mnframe's ``DummyCommunicator``."""

from mnframe.communicators.dummy import DummyCommunicator

__all__ = ["DummyCommunicator"]
