"""The MLP of ChainerMN's MNIST example: three Linear layers with ReLU.

Input sizes are inferred (``Linear(None, n)``), so the same class fits 8x8
digits and 28x28 MNIST.
"""

import chainer
import chainer.functions as F
import chainer.links as L


class MLP(chainer.Chain):
    """x -> relu(l1) -> relu(l2) -> l3 logits."""

    def __init__(self, n_units=1000, n_out=10):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(None, n_units)
            self.l2 = L.Linear(None, n_units)
            self.l3 = L.Linear(None, n_out)

    def forward(self, x):
        h1 = F.relu(self.l1(x))
        h2 = F.relu(self.l2(h1))
        return self.l3(h2)
