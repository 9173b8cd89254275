"""ChainerMN's module path ``chainermn.communicators.pure_nccl_communicator``: mnframe's
``PureNcclCommunicator`` (the class imports without CuPy; creating one needs CUDA and NCCL)."""

from mnframe.communicators.pure_nccl import PureNcclCommunicator

__all__ = ["PureNcclCommunicator"]
