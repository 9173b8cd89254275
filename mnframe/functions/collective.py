"""Differentiable collective communication: bcast, gather, scatter, allgather, alltoall.

Every rank of the communicator must call the function (forward) and later run
backward through its result, because each backward is itself a collective:

| function  | forward                         | backward                                             |
|-----------|---------------------------------|------------------------------------------------------|
| bcast     | root's x to every rank          | gradients gathered to root and summed                |
| gather    | every x to root (tuple)         | root's gradients scattered back                      |
| scatter   | root's xs[j] to rank j          | gradients gathered back to root                      |
| allgather | every x to every rank (tuple)   | x's gradient summed over ranks (alltoall, then sum)  |
| alltoall  | xs[j] to rank j (tuple)         | gradients passed back by alltoall                    |

Ranks that get no real output (gather's non-roots) receive a delegate
variable: run backward from it (or pseudo_connect it to your outputs).
Arrays may differ in shape per rank; any dtype the communicator carries works
(the collectives need one dtype across ranks, as MPI does).
"""

import chainer
import numpy
from chainer import backend

from mnframe.functions import _transport
from mnframe.functions.point_to_point import _anchor, _delegate_array


def _grads_or_zeros(grad_outputs, metas, xp):
    """Output gradients as arrays; an unused output counts as a zero gradient
    (the other ranks still expect its message)."""
    return [_transport.zeros(m, xp) if g is None else g.array for g, m in zip(grad_outputs, metas)]


def _metas(arrays):
    return [_transport.ArrayMeta.of(a) for a in arrays]


def _sum(arrays, meta, xp, what):
    arrays = [_transport.conform(xp.asarray(a), meta, what) for a in arrays]
    total = arrays[0].copy()
    for a in arrays[1:]:
        total += a
    return total


class _Collective(chainer.FunctionNode):
    """Common state: the communicator, the root, the array module of the inputs."""

    name = "collective"

    def __init__(self, comm, root=0):
        self.comm, self.root = comm, root
        self._xp = numpy

    @property
    def label(self):
        return f"{type(self).__name__}(rank={self.comm.rank}/{self.comm.size}, root={self.root})"

    def what(self):
        return f"backward of mnframe.functions.{self.name} on rank {self.comm.rank}"

    def _is_root(self):
        return self.comm.rank == self.root

    def _var(self, array, meta):
        return chainer.Variable(_transport.conform(self._xp.asarray(array), meta, self.what()))


class Bcast(_Collective):
    name = "bcast"

    def forward(self, inputs):
        self._xp = backend.get_array_module(*inputs)
        y = _transport.bcast(self.comm, inputs[0], self.root)
        self._meta = _transport.ArrayMeta.of(y)
        return (y,)

    def backward(self, _target_input_indexes, grad_outputs):
        (gy,) = _grads_or_zeros(grad_outputs, [self._meta], self._xp)
        gys = _transport.gather(self.comm, gy, self.root)
        if not self._is_root():
            return (None,)
        return (chainer.Variable(_sum(gys, self._meta, self._xp, self.what())),)


class Gather(_Collective):
    name = "gather"

    def forward(self, inputs):
        (x,) = inputs
        self._xp = backend.get_array_module(x)
        self._meta = _transport.ArrayMeta.of(x)
        ys = _transport.gather(self.comm, x, self.root)
        if not self._is_root():
            return (_delegate_array(self._xp),)
        self._out_metas = _metas(ys)
        return ys

    def backward(self, _target_input_indexes, grad_outputs):
        gys = _grads_or_zeros(grad_outputs, self._out_metas, self._xp) if self._is_root() else None
        gx = _transport.scatter(self.comm, gys, self.root)
        return (self._var(gx, self._meta),)


class Scatter(_Collective):
    name = "scatter"

    def forward(self, inputs):
        self._xp = backend.get_array_module(*inputs)
        if self._is_root():
            self._in_metas = _metas(inputs)
        y = _transport.scatter(self.comm, inputs, self.root)
        self._meta = _transport.ArrayMeta.of(y)
        return (y,)

    def backward(self, _target_input_indexes, grad_outputs):
        (gy,) = _grads_or_zeros(grad_outputs, [self._meta], self._xp)
        gxs = _transport.gather(self.comm, gy, self.root)
        if not self._is_root():
            return (None,)
        return tuple(self._var(g, m) for g, m in zip(gxs, self._in_metas))


class AllGather(_Collective):
    name = "allgather"

    def forward(self, inputs):
        (x,) = inputs
        self._xp = backend.get_array_module(x)
        self._meta = _transport.ArrayMeta.of(x)
        ys = _transport.allgather(self.comm, x)
        self._out_metas = _metas(ys)
        return ys

    def backward(self, _target_input_indexes, grad_outputs):
        # Output i of rank j is rank i's x, so x's gradient is the sum over j of
        # rank j's gradient for output (this rank): an alltoall, then a sum.
        gys = _grads_or_zeros(grad_outputs, self._out_metas, self._xp)
        parts = _transport.alltoall(self.comm, gys)
        return (chainer.Variable(_sum(parts, self._meta, self._xp, self.what())),)


class AllToAll(_Collective):
    name = "alltoall"

    def forward(self, inputs):
        self._xp = backend.get_array_module(*inputs)
        self._in_metas = _metas(inputs)
        ys = _transport.alltoall(self.comm, inputs)
        self._out_metas = _metas(ys)
        return ys

    def backward(self, _target_input_indexes, grad_outputs):
        gys = _grads_or_zeros(grad_outputs, self._out_metas, self._xp)
        gxs = _transport.alltoall(self.comm, gys)
        return tuple(self._var(g, m) for g, m in zip(gxs, self._in_metas))


def bcast(comm, x, root=0):
    """Broadcast root's ``x``; returns the variable on every rank.

    ``x`` is ignored on non-root ranks (pass None). Backward sums every rank's
    gradient into root's ``x``.
    """
    _transport.check_root(comm, root, "mnframe.functions.bcast")
    inputs = (x,) if comm.rank == root else (_anchor(numpy),)
    (y,) = Bcast(comm, root).apply(inputs)
    return y


def gather(comm, x, root=0):
    """Gather every rank's ``x`` to root.

    Returns a tuple of ``comm.size`` variables on root and a delegate variable
    elsewhere (backward must be run from it). Backward scatters root's
    gradients back to the ranks.
    """
    _transport.check_root(comm, root, "mnframe.functions.gather")
    ys = Gather(comm, root).apply((x,))
    return tuple(ys) if comm.rank == root else ys[0]


def scatter(comm, xs, root=0):
    """Scatter root's ``xs`` (one variable per rank; ignored elsewhere).

    Returns this rank's variable. Backward gathers the gradients to root. A
    wrong number of variables raises on every rank (the communicator shares
    the verdict).
    """
    _transport.check_root(comm, root, "mnframe.functions.scatter")
    if comm.rank == root:
        inputs = tuple(xs) if isinstance(xs, (list, tuple)) else (xs,)
        if not inputs:  # let the communicator report it on every rank
            _transport.scatter(comm, (), root)
    else:
        inputs = (_anchor(numpy),)
    (y,) = Scatter(comm, root).apply(inputs)
    return y


def allgather(comm, x):
    """Every rank's ``x`` on every rank, as a tuple of ``comm.size`` variables.

    Backward reduces: the gradient of ``x`` is the sum over ranks of the
    gradient each rank gives to this rank's piece.
    """
    return tuple(AllGather(comm).apply((x,)))


def alltoall(comm, xs):
    """Send ``xs[j]`` to rank j; returns the ``comm.size`` received variables.

    Backward passes the gradients back the same way. A wrong number of
    variables raises on every rank (the communicator shares the verdict).
    """
    xs = tuple(xs)
    if not xs:  # let the communicator report it on every rank
        _transport.alltoall(comm, ())
    return tuple(AllToAll(comm).apply(xs))
