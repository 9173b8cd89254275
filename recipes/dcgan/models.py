"""DCGAN generator and discriminator, as in Chainer's (and ChainerMN's) DCGAN example.

The generator maps ``n_hidden``-dimensional noise to a 3 x (8 * bottom_width)
square image in [-1, 1] through one Linear and four deconvolutions; the
discriminator mirrors it with strided convolutions and returns one logit per
image. ``ch`` (the widest channel count, 512 in the example) makes them small.
"""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np


class Generator(chainer.Chain):
    """z (batch, n_hidden) -> images (batch, 3, 8 * bottom_width, 8 * bottom_width)."""

    def __init__(self, n_hidden=100, bottom_width=4, ch=512, wscale=0.02):
        super().__init__()
        self.n_hidden, self.ch, self.bottom_width = n_hidden, ch, bottom_width
        w = chainer.initializers.Normal(wscale)
        with self.init_scope():
            self.l0 = L.Linear(n_hidden, bottom_width * bottom_width * ch, initialW=w)
            self.dc1 = L.Deconvolution2D(ch, ch // 2, 4, 2, 1, initialW=w)
            self.dc2 = L.Deconvolution2D(ch // 2, ch // 4, 4, 2, 1, initialW=w)
            self.dc3 = L.Deconvolution2D(ch // 4, ch // 8, 4, 2, 1, initialW=w)
            self.dc4 = L.Deconvolution2D(ch // 8, 3, 3, 1, 1, initialW=w)
            self.bn0 = L.BatchNormalization(bottom_width * bottom_width * ch)
            self.bn1 = L.BatchNormalization(ch // 2)
            self.bn2 = L.BatchNormalization(ch // 4)
            self.bn3 = L.BatchNormalization(ch // 8)

    def make_hidden(self, batchsize):
        """Noise for ``batchsize`` images, uniform in [-1, 1), on the model's device."""
        z = np.random.uniform(-1, 1, (batchsize, self.n_hidden, 1, 1)).astype(np.float32)
        return self.xp.asarray(z)

    def forward(self, z):
        h = F.reshape(F.relu(self.bn0(self.l0(z))), (len(z), self.ch, self.bottom_width, self.bottom_width))
        h = F.relu(self.bn1(self.dc1(h)))
        h = F.relu(self.bn2(self.dc2(h)))
        h = F.relu(self.bn3(self.dc3(h)))
        return F.tanh(self.dc4(h))


class Discriminator(chainer.Chain):
    """images -> one real/fake logit per image."""

    def __init__(self, bottom_width=4, ch=512, wscale=0.02):
        super().__init__()
        w = chainer.initializers.Normal(wscale)
        with self.init_scope():
            self.c0_0 = L.Convolution2D(3, ch // 8, 3, 1, 1, initialW=w)
            self.c0_1 = L.Convolution2D(ch // 8, ch // 4, 4, 2, 1, initialW=w)
            self.c1_0 = L.Convolution2D(ch // 4, ch // 4, 3, 1, 1, initialW=w)
            self.c1_1 = L.Convolution2D(ch // 4, ch // 2, 4, 2, 1, initialW=w)
            self.c2_0 = L.Convolution2D(ch // 2, ch // 2, 3, 1, 1, initialW=w)
            self.c2_1 = L.Convolution2D(ch // 2, ch // 1, 4, 2, 1, initialW=w)
            self.c3_0 = L.Convolution2D(ch // 1, ch // 1, 3, 1, 1, initialW=w)
            self.l4 = L.Linear(bottom_width * bottom_width * ch, 1, initialW=w)
            self.bn0_1 = L.BatchNormalization(ch // 4, use_gamma=False)
            self.bn1_0 = L.BatchNormalization(ch // 4, use_gamma=False)
            self.bn1_1 = L.BatchNormalization(ch // 2, use_gamma=False)
            self.bn2_0 = L.BatchNormalization(ch // 2, use_gamma=False)
            self.bn2_1 = L.BatchNormalization(ch // 1, use_gamma=False)
            self.bn3_0 = L.BatchNormalization(ch // 1, use_gamma=False)

    def forward(self, x):
        h = F.leaky_relu(self.c0_0(x))
        h = F.leaky_relu(self.bn0_1(self.c0_1(h)))
        h = F.leaky_relu(self.bn1_0(self.c1_0(h)))
        h = F.leaky_relu(self.bn1_1(self.c1_1(h)))
        h = F.leaky_relu(self.bn2_0(self.c2_0(h)))
        h = F.leaky_relu(self.bn2_1(self.c2_1(h)))
        h = F.leaky_relu(self.bn3_0(self.c3_0(h)))
        return self.l4(h)
