"""ChainerMN's module path ``chainermn.communicators.hierarchical_communicator``
(ChainerMN 6 and earlier): mnframe's ``HierarchicalCommunicator``."""

from mnframe.communicators.hierarchical import HierarchicalCommunicator

__all__ = ["HierarchicalCommunicator"]
