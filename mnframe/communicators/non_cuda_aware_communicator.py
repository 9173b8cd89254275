"""ChainerMN's module path ``chainermn.communicators.non_cuda_aware_communicator``: mnframe's
``NonCudaAwareCommunicator`` (the class imports without CuPy; creating one needs CUDA)."""

from mnframe.communicators.non_cuda_aware import NonCudaAwareCommunicator

__all__ = ["NonCudaAwareCommunicator"]
