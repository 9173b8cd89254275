"""ChainerMN's module path ``chainermn.functions.batch_normalization``.

``get_communication_backend`` validates and resolves a multi-node batch
normalization backend name as ChainerMN does (``'nccl'`` needs a
``PureNcclCommunicator``; ``'auto'`` picks it for one). ``MultiNodeBNImplSelector``
returns mnframe's statistics exchange for that backend (links/batch_normalization.py),
not a Chainer ``GeneralBatchNormalizationImpl``: mnframe's MNBN has its own function node.
"""

from mnframe.links import batch_normalization as _mnbn

_NAMES = ("mpi", "nccl", "auto")


def get_communication_backend(comm, communication_backend="auto"):
    """``'mpi'`` or ``'nccl'``: the backend multi-node BN uses with ``comm``."""
    if communication_backend not in _NAMES:
        raise ValueError(
            f"MultiNodeBatchNormalization does not support {communication_backend}; use one of {', '.join(_NAMES)}"
        )
    from mnframe.communicators.pure_nccl import PureNcclCommunicator

    is_nccl = isinstance(comm, PureNcclCommunicator)
    if communication_backend == "nccl" and not is_nccl:
        raise ValueError(f"nccl is not supported in MultiNodeBatchNormalization when using {type(comm)}")
    if communication_backend == "auto":
        return "nccl" if is_nccl else "mpi"
    return communication_backend


class MultiNodeBNImplSelector:
    """Called with ``(batch_norm_func, inputs)``: the statistics exchange of backend ``communication_backend_name``."""

    def __init__(self, comm, communication_backend_name):
        self.comm = comm
        self.communication_backend_name = communication_backend_name

    def __call__(self, _batch_norm_func, _inputs):
        if self.communication_backend_name == "nccl":
            return _mnbn._NcclExchange(self.comm)
        return _mnbn._MpiExchange(self.comm)
