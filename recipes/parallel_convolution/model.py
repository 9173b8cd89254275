"""Channel-parallel convolution (ChainerMN's parallel_convolution example, made exact).

``ParallelConvolution2D`` splits a convolution's *output channels* over the
ranks of ``comm``: each rank convolves the whole input with its own slice of
the filters, and ``mnframe.functions.allgather`` joins the slices back into
the full output on every rank. All ranks see the same batch (the recipe uses
the multi-node iterator), so the compute of each convolution is divided by the
number of ranks.

One difference from the example, on purpose: every rank keeps the full
filter bank (initialised identically), and uses only its slice. The slice's
gradient arrives summed over the ranks through allgather's backward, and the
multi-node optimizer's mean divides it back, so training is mathematically the
single-process VGG, works with any number of ranks (uneven slices are padded
for the allgather) and with the standard data-parallel pipeline. The example's
variant instead also splits the input channels, which changes the model.

``ParallelConvNet`` is the example's VGG (the CIFAR recipe's layout) built from
such convolutions; ``width`` scales the channels for small runs. ``comm`` is
the communicator to split over (the runner passes the model communicator:
the ranks that share each batch).
"""

import math

import chainer
import chainer.functions as F
import chainer.links as L

from mnframe.recipes.cifar.models import VGG


class ParallelConvolution2D(chainer.Link):
    """A ``ksize`` x ``ksize`` convolution whose output channels are computed across ``comm``."""

    def __init__(self, comm, in_channels, out_channels, ksize=3, stride=1, pad=1, nobias=True):
        super().__init__()
        self.comm, self.out_channels = comm, out_channels
        self.stride, self.pad = stride, pad
        size, rank = comm.size, comm.rank
        self.chunk = math.ceil(out_channels / size)
        self.lo = min(rank * self.chunk, out_channels)
        self.hi = min(self.lo + self.chunk, out_channels)
        with self.init_scope():
            self.W = chainer.Parameter(chainer.initializers.LeCunNormal(), (out_channels, in_channels, ksize, ksize))
            self.b = None if nobias else chainer.Parameter(0, (out_channels,))

    def forward(self, x):
        from mnframe import functions as mnf

        if self.lo == self.hi:  # more ranks than channels: this rank only pads
            w = self.W[:1] * 0
            b = None if self.b is None else self.b[:1] * 0
        else:
            w, b = self.W[self.lo : self.hi], None if self.b is None else self.b[self.lo : self.hi]
        y = F.convolution_2d(x, w, b, stride=self.stride, pad=self.pad)
        missing = self.chunk - y.shape[1]
        if missing:  # every rank must contribute the same shape to the allgather
            y = F.pad(y, ((0, 0), (0, missing), (0, 0), (0, 0)), "constant")
        return F.concat(mnf.allgather(self.comm, y), axis=1)[:, : self.out_channels]


class ParallelBlock(chainer.Chain):
    """Parallel convolution (no bias) -> batch norm -> ReLU."""

    def __init__(self, comm, in_channels, out_channels):
        super().__init__()
        with self.init_scope():
            self.conv = ParallelConvolution2D(comm, in_channels, out_channels, 3, pad=1)
            self.bn = L.BatchNormalization(out_channels)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class ParallelConvNet(VGG):
    """The CIFAR VGG with channel-parallel convolutions: ``ParallelConvNet(comm, n_class=10, width=1.0)``."""

    def __init__(self, comm, n_class=10, width=1.0, in_channels=3):
        super().__init__(
            n_class=n_class,
            width=width,
            in_channels=in_channels,
            block=lambda cin, cout: ParallelBlock(comm, cin, cout),
        )
