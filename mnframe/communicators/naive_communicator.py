"""ChainerMN's module path ``chainermn.communicators.naive_communicator``: mnframe's ``NaiveCommunicator``."""

from mnframe.communicators.naive import NaiveCommunicator

__all__ = ["NaiveCommunicator"]
