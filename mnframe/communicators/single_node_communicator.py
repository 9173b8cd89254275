"""ChainerMN's module path ``chainermn.communicators.single_node_communicator``
(ChainerMN 6 and earlier): mnframe's ``SingleNodeCommunicator``."""

from mnframe.communicators.single_node import SingleNodeCommunicator

__all__ = ["SingleNodeCommunicator"]
