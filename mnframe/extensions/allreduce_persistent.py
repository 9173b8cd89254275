"""Average a model's floating-point persistents (BN running statistics) over ranks.

Each rank's ``avg_mean``/``avg_var`` only saw its own batches; averaging them
gives estimates from more examples. Integer persistents (counters such as BN's
``N``) are left alone, as in the spec. All float persistents travel in one
float64 buffer through one allreduce; every rank first checks that it holds
the same persistents (names, shapes), so a model mismatch gives the same clear
error on every rank instead of a garbled average or a hang.
"""

import numbers

import chainer
import numpy
from chainer import backend
from chainer.training import extension

from mnframe.communicators import host_collectives

__all__ = ["AllreducePersistent"]


def _float_persistents(model):
    """Sorted ``(path, link, attr, value)`` of the float persistents of ``model``."""
    out = []
    for lname, link in model.namedlinks():
        for pname in link._persistent:
            value = link.__dict__[pname]
            if _is_float(value):
                out.append((f"{lname}/{pname}", link, pname, value))
    out.sort(key=lambda t: t[0])
    return out


def _is_float(value):
    dtype = getattr(value, "dtype", None)
    if dtype is not None:
        return numpy.issubdtype(numpy.dtype(dtype), numpy.floating)
    return isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral)


class AllreducePersistent(extension.Extension):
    """Trainer extension: replace float persistents by their mean over all ranks.

    Call it rarely (before saving or evaluating). It can also be called
    directly without a trainer: ``AllreducePersistent(model, comm)()``.

    Args:
        model (chainer.Link): the model whose persistents are averaged.
        comm: a mnframe communicator (or an mpi4py communicator).
    """

    trigger = 1, "epoch"
    # Before evaluators and writers, so they see the averaged statistics.
    priority = extension.PRIORITY_WRITER + 1

    def __init__(self, model, comm):
        if not isinstance(model, chainer.Link):
            raise TypeError(f"AllreducePersistent expects a chainer.Link, got {type(model).__name__}")
        self.model = model
        self.comm = comm

    def __call__(self, trainer=None):  # noqa: ARG002 - ChainerMN's signature (trainer= by keyword)
        items = _float_persistents(self.model)
        layout = [(path, tuple(numpy.shape(v))) for path, _, _, v in items]
        layouts = host_collectives.allgather_obj(self.comm, layout, name="allreduce_persistent.layout")
        bad = [r for r, other in enumerate(layouts) if other != layouts[0]]
        if bad:
            raise RuntimeError(
                "AllreducePersistent: ranks hold different float persistents (rank 0 has "
                f"{layouts[0]}, ranks {bad} differ, e.g. {layouts[bad[0]]}); use the same model "
                "on every rank and run one forward pass everywhere before averaging lazily "
                "initialised links"
            )
        if not items:
            return
        host = [numpy.asarray(backend.CpuDevice().send(v), dtype=numpy.float64).ravel() for _, _, _, v in items]
        sizes = [h.size for h in host]
        total = host_collectives.allreduce_sum(self.comm, numpy.concatenate(host), name="allreduce_persistent")
        total /= len(layouts)
        offset = 0
        for (_, link, pname, value), n in zip(items, sizes):
            mean = total[offset : offset + n]
            offset += n
            if isinstance(value, numpy.generic):  # NumPy scalar: immutable, replace it
                setattr(link, pname, value.dtype.type(mean[0]))
            elif not hasattr(value, "shape"):  # Python float
                setattr(link, pname, float(mean[0]))
            else:  # an array on any device: update in place (optimizers may hold it)
                device = backend.get_device_from_array(value)
                value[...] = device.send(mean.reshape(value.shape).astype(value.dtype))
