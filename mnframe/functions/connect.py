"""``pseudo_connect``: join a delegate variable to the variables a graph returns.

The outputs are the actual variables unchanged; backward passes their gradients
through and gives the delegate a zero gradient, so backward also walks the
graph behind the delegate (e.g. an earlier ``send``) after this one.
"""

import chainer
import numpy
from chainer import backend

from mnframe.functions import _transport


class PseudoConnect(chainer.FunctionNode):
    """Inputs: delegate, *actual. Outputs: *actual (the same arrays)."""

    _delegate_meta = None
    _delegate_xp = numpy

    def forward(self, inputs):
        self._delegate_meta = _transport.ArrayMeta.of(inputs[0])
        self._delegate_xp = backend.get_array_module(inputs[0])
        return tuple(inputs[1:])

    def backward(self, _target_input_indexes, grad_outputs):
        zero = chainer.Variable(_transport.zeros(self._delegate_meta, self._delegate_xp))
        return (zero,) + tuple(grad_outputs)


def pseudo_connect(delegate_variable, *actual_variables):
    """Return ``actual_variables`` (always as a tuple, as ChainerMN does:
    ``y, = pseudo_connect(phi, y)``) connected to ``delegate_variable``.

    ``delegate_variable=None`` is allowed and connects to nothing.
    """
    if not actual_variables:
        raise ValueError("pseudo_connect needs at least one actual variable to return")
    if delegate_variable is None:
        arrays = [v.array if isinstance(v, chainer.Variable) else v for v in actual_variables]
        delegate_variable = backend.get_array_module(*arrays).empty((0,), numpy.float32)
    return PseudoConnect().apply((delegate_variable,) + tuple(actual_variables))
