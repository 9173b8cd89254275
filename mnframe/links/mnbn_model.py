"""Turn a model's BatchNormalization links into MultiNodeBatchNormalization.

``create_mnbn_model`` returns a deep copy of a model in which every
``chainer.links.BatchNormalization`` (at any depth, in Chains, ChainLists and
Sequentials) is replaced by a ``MultiNodeBatchNormalization`` carrying the same
parameters, running statistics and settings. The original model is untouched;
the communicator is shared, not copied.
"""

import copy

import chainer
from chainer.links import BatchNormalization

from mnframe.links.batch_normalization import MultiNodeBatchNormalization

__all__ = ["create_mnbn_model"]


def create_mnbn_model(link, comm, communication_backend="auto"):
    """A copy of ``link`` with every BatchNormalization made multi-node.

    Args:
        link: a ``chainer.Link`` (a BatchNormalization itself is converted too).
        comm: the communicator the new links share batch statistics over.
        communication_backend: ``'auto'``, ``'mpi'`` or ``'nccl'`` (see
            ``MultiNodeBatchNormalization``).
    """
    if not isinstance(link, chainer.Link):
        raise TypeError(f"create_mnbn_model expects a chainer.Link, got {type(link).__name__}")
    # Links that already hold the communicator (MNBN, MultiNodeChainList) keep sharing it.
    model = copy.deepcopy(link, {id(comm): comm})
    return _convert(model, comm, communication_backend)


def _convert(link, comm, backend):
    if _is_plain_bn(link):
        return _to_mnbn(link, comm, backend)
    if isinstance(link, chainer.ChainList):
        # Iterating a Sequential yields its layers (functions too); a ChainList its links.
        for i, child in enumerate(list(link)):
            if isinstance(child, chainer.Link):
                new = _convert(child, comm, backend)
                if new is not child:
                    link[i] = new
    elif isinstance(link, chainer.Chain):
        for child in list(link.children()):
            new = _convert(child, comm, backend)
            if new is not child:
                name = child.name
                delattr(link, name)
                with link.init_scope():
                    setattr(link, name, new)
    return link


def _is_plain_bn(link):
    return isinstance(link, BatchNormalization) and not isinstance(link, MultiNodeBatchNormalization)


def _to_mnbn(bn, comm, backend):
    """A MultiNodeBatchNormalization with ``bn``'s settings, parameters and statistics."""
    size = None if bn.avg_mean is None else bn.avg_mean.shape
    dtype = getattr(bn, "_highprec_dtype", None)
    if dtype is None:
        dtype = bn.avg_mean.dtype
    new = MultiNodeBatchNormalization(
        size,
        comm,
        decay=bn.decay,
        eps=bn.eps,
        dtype=dtype,
        use_gamma=bn.gamma is not None,
        use_beta=bn.beta is not None,
        communication_backend=backend,
        axis=bn.axis,
    )
    new.to_device(bn.device)
    for pname in ("gamma", "beta"):
        src = getattr(bn, pname)
        if src is not None and src.array is not None:
            getattr(new, pname).array = src.array  # bn is a private deep copy: no aliasing
    for pname in bn._persistent:
        setattr(new, pname, getattr(bn, pname))
    return new
