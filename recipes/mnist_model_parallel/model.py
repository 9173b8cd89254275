"""The MNIST MLP split into components for model parallelism.

As in ChainerMN's model-parallel MNIST example, with two ranks:

* rank 0: ``MLP0Head`` (x -> h, sent to rank 1), then ``MLP0Tail`` (receives
  h back from rank 1 -> logits); rank 0's ``MultiNodeChainList`` is wrapped by
  ``L.Classifier``.
* rank 1: ``MLP1Middle`` (receives h from rank 0 -> h, sent back to rank 0); it
  trains on an empty dataset because its input comes from rank 0.

The components are plain Chains: the sends and receives are done by the
``MultiNodeChainList`` they are added to (``rank_in``/``rank_out``).
"""

import chainer
import chainer.functions as F
import chainer.links as L


class MLP0Head(chainer.Chain):
    """x -> relu(l1(x)); its output goes to the middle rank."""

    def __init__(self, n_units=1000):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(None, n_units)

    def forward(self, x):
        return F.relu(self.l1(x))


class MLP1Middle(chainer.Chain):
    """h -> relu(l2(h)); receives from and sends back to rank 0."""

    def __init__(self, n_units=1000):
        super().__init__()
        with self.init_scope():
            self.l2 = L.Linear(None, n_units)

    def forward(self, h):
        return F.relu(self.l2(h))


class MLP0Tail(chainer.Chain):
    """h -> l3(h) logits, the model output on rank 0."""

    def __init__(self, n_out=10):
        super().__init__()
        with self.init_scope():
            self.l3 = L.Linear(None, n_out)

    def forward(self, h):
        return self.l3(h)
