"""ChainerMN's module path ``chainermn.communicators.communicator_base``: mnframe's ``CommunicatorBase``."""

from mnframe.communicators.base import CommunicatorBase

__all__ = ["CommunicatorBase"]
