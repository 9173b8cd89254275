"""The VGG-style network of Chainer's (and ChainerMN's) CIFAR example.

Thirteen 3x3 convolution blocks (convolution, batch norm, ReLU) with dropout,
five max-poolings and two fully connected layers. ``width`` scales every
channel count so that CI can run a tiny version. It returns logits: the recipe
wraps it in ``L.Classifier``.
"""

import chainer
import chainer.functions as F
import chainer.links as L

# (out channels at width 1, dropout after the block or None); 'M' = 2x2 max-pooling
_LAYOUT = (
    (64, 0.3),
    (64, None),
    "M",
    (128, 0.4),
    (128, None),
    "M",
    (256, 0.4),
    (256, 0.4),
    (256, None),
    "M",
    (512, 0.4),
    (512, 0.4),
    (512, None),
    "M",
    (512, 0.4),
    (512, 0.4),
    (512, None),
    "M",
)


class Block(chainer.Chain):
    """Convolution (ksize x ksize, no bias) -> batch norm -> ReLU."""

    def __init__(self, out_channels, ksize=3, pad=1):
        super().__init__()
        with self.init_scope():
            self.conv = L.Convolution2D(None, out_channels, ksize, pad=pad, nobias=True)
            self.bn = L.BatchNormalization(out_channels)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class VGG(chainer.Chain):
    """VGG for 32x32 images: ``VGG(n_class=10, width=1.0)``.

    ``block(in_channels, out_channels)`` makes each convolution block (default
    ``Block``); the parallel_convolution recipe passes a channel-parallel one.
    """

    def __init__(self, n_class=10, width=1.0, in_channels=3, block=None):
        super().__init__()
        make_block = block or (lambda _, out_channels: Block(out_channels))
        self._plan = []  # ('block', name, dropout) or ('pool',)
        with self.init_scope():
            for i, item in enumerate(_LAYOUT):
                if item == "M":
                    self._plan.append(("pool", None, None))
                    continue
                channels, dropout = item
                channels = max(1, int(round(channels * width)))
                name = f"block{i}"
                setattr(self, name, make_block(in_channels, channels))
                self._plan.append(("block", name, dropout))
                in_channels = channels
            fc_units = max(1, int(round(512 * width)))
            self.fc1 = L.Linear(None, fc_units, nobias=True)
            self.bn_fc1 = L.BatchNormalization(fc_units)
            self.fc2 = L.Linear(None, n_class, nobias=True)

    def forward(self, x):
        h = x
        for kind, name, dropout in self._plan:
            if kind == "pool":
                h = F.max_pooling_2d(h, ksize=2, stride=2)
                continue
            h = getattr(self, name)(h)
            if dropout is not None:
                h = F.dropout(h, ratio=dropout)
        h = F.dropout(h, ratio=0.5)
        h = F.relu(self.bn_fc1(self.fc1(h)))
        h = F.dropout(h, ratio=0.5)
        return self.fc2(h)
