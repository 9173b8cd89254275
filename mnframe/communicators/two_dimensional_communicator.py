"""ChainerMN's module path ``chainermn.communicators.two_dimensional_communicator``
(ChainerMN 6 and earlier): mnframe's ``TwoDimensionalCommunicator``."""

from mnframe.communicators.two_dimensional import TwoDimensionalCommunicator

__all__ = ["TwoDimensionalCommunicator"]
