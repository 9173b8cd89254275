"""Differentiable point-to-point communication: ``send`` and ``recv``.

``send`` ships variables to another rank and returns a *delegate variable*: an
empty variable that only carries the graph, so that ``backward()`` started from
it (or from a variable connected to it by ``recv(..., delegate_variable=...)``
or ``pseudo_connect``) reaches the send and receives the gradients back.
``recv`` returns the received variables; their backward sends the gradients to
the sender. Both sides must therefore run backward through matching pairs in
the reverse of the forward order (MultiNodeChainList chains its pairs so this
always holds).
"""

import chainer
import numpy
from chainer import backend

from mnframe.functions import _transport


def _delegate_array(xp):
    return xp.empty((0,), dtype=numpy.float32)


def _anchor(xp):
    """A fresh leaf that requires grad: it keeps the node in the graph even when
    none of the real inputs requires grad (otherwise the peer would wait forever
    for a gradient message that is never sent)."""
    var = chainer.Variable(_delegate_array(xp), requires_grad=True)
    var.name = "delegate_variable"
    return var


def _xp_of(values):
    arrays = [v.array if isinstance(v, chainer.Variable) else v for v in values]
    return backend.get_array_module(*arrays) if arrays else numpy


class Send(chainer.FunctionNode):
    """Inputs: the variables to send, then one graph anchor. Output: the delegate."""

    def __init__(self, comm, peer, tag):
        self.comm, self.peer, self.tag = comm, peer, tag
        self._metas = None
        self._xp = numpy

    @property
    def label(self):
        return f"Send(to={self.peer}, tag={self.tag})"

    def forward(self, inputs):
        xs = inputs[:-1]
        self._xp = backend.get_array_module(*inputs)
        self._metas = [_transport.ArrayMeta.of(x) for x in xs]
        _transport.send(self.comm, xs, self.peer, self.tag)
        return (_delegate_array(self._xp),)

    def backward(self, _target_input_indexes, _grad_outputs):
        xp = self._xp
        what = f"backward of send(rank={self.peer}, tag={self.tag}) on rank {self.comm.rank}"
        gxs = _transport.on_device(_transport.recv_known(self.comm, self._metas, self.peer, self.tag, what), xp)
        grads = [chainer.Variable(g) for g in gxs] + [chainer.Variable(_delegate_array(xp))]
        return tuple(grads)


class Recv(chainer.FunctionNode):
    """Input: the delegate variable (or an anchor). Outputs: the received variables."""

    def __init__(self, comm, peer, tag):
        self.comm, self.peer, self.tag = comm, peer, tag
        self._metas = None
        self._delegate_meta = None
        self._delegate_xp = numpy

    @property
    def label(self):
        return f"Recv(from={self.peer}, tag={self.tag})"

    def forward(self, inputs):
        (delegate,) = inputs
        self._delegate_meta = _transport.ArrayMeta.of(delegate)
        self._delegate_xp = backend.get_array_module(delegate)
        what = f"recv(rank={self.peer}, tag={self.tag}) on rank {self.comm.rank}"
        ys = _transport.recv(self.comm, self.peer, self.tag)
        if not ys:
            raise RuntimeError(f"{what}: the sender sent no arrays")
        self._metas = [_transport.ArrayMeta.of(y) for y in ys]
        return ys  # on the device the sender used, like ChainerMN

    def backward(self, _target_input_indexes, grad_outputs):
        live = [g.array for g in grad_outputs if g is not None]
        xp = backend.get_array_module(*live) if live else numpy
        # An output the loss does not depend on gets a zero gradient: the sender
        # waits for one message per variable it sent.
        gys = [_transport.zeros(m, xp) if g is None else g.array for g, m in zip(grad_outputs, self._metas)]
        _transport.send(self.comm, gys, self.peer, self.tag)
        # the delegate's gradient lives where the delegate does (an anchor is on the host)
        return (chainer.Variable(_transport.zeros(self._delegate_meta, self._delegate_xp)),)


def send(x, communicator, rank, tag=0):
    """Send ``x`` (a variable, an array, or a tuple/list of them) to ``rank``.

    Returns the delegate variable: an empty variable holding only the graph.
    Backward from it receives the gradients of ``x`` from ``rank``.
    """
    _transport.check_peer(communicator, rank, "mnframe.functions.send")
    xs = tuple(x) if isinstance(x, (tuple, list)) else (x,)
    if not xs:
        raise ValueError("mnframe.functions.send: nothing to send (x is an empty sequence)")
    anchor = _anchor(_xp_of(xs))
    (delegate,) = Send(communicator, rank, tag).apply(xs + (anchor,))
    delegate.name = "delegate_variable"
    return delegate


def recv(communicator, rank, delegate_variable=None, tag=0, force_tuple=False):
    """Receive the variables sent by ``send`` on ``rank``.

    ``delegate_variable`` (the output of a previous send or graph component)
    links this receive to it, so backward continues there after sending the
    gradients back. Returns a variable, or a tuple when several were sent or
    ``force_tuple`` is true.
    """
    _transport.check_peer(communicator, rank, "mnframe.functions.recv")
    if delegate_variable is None:
        delegate_variable = _anchor(numpy)
    ys = Recv(communicator, rank, tag).apply((delegate_variable,))
    if len(ys) == 1 and not force_tuple:
        return ys[0]
    return tuple(ys)
