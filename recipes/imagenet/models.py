"""ImageNet models of ChainerMN's ImageNet example: AlexNet, NIN, GoogLeNetBN, ResNet50.

Each model's ``__call__(x, t)`` returns the softmax cross-entropy loss and
reports ``loss`` and ``accuracy`` (so the updater and evaluator work without
``L.Classifier``); ``insize`` is the crop size the dataset should produce.

Two deliberate differences from the original example, both for small runs:
``width`` scales every channel count (``width=0.125`` gives a tiny network for
CI smoke tests), and the last spatial pooling is global, so any ``insize`` that
survives the strides (e.g. 64) works for synthetic-data benchmarks.
"""

import chainer
import chainer.functions as F
import chainer.links as L


def _ch(n, width):
    """A channel count scaled by ``width`` (at least 1)."""
    return max(1, int(round(n * width)))


def _global_average(h):
    return F.average_pooling_2d(h, h.shape[2:])


class _ImageNetModel(chainer.Chain):
    """Shared loss/accuracy reporting: subclasses implement ``predict(x)``."""

    insize = 224

    def __call__(self, x, t):
        y = self.predict(x)
        loss = F.softmax_cross_entropy(y, t)
        chainer.report({"loss": loss, "accuracy": F.accuracy(y, t)}, self)
        return loss


class AlexNet(_ImageNetModel):
    """AlexNet (single-stream, with local response normalization and dropout)."""

    insize = 227

    def __init__(self, n_class=1000, width=1.0):
        super().__init__()
        c = lambda n: _ch(n, width)  # noqa: E731
        with self.init_scope():
            self.conv1 = L.Convolution2D(None, c(96), 11, stride=4)
            self.conv2 = L.Convolution2D(None, c(256), 5, pad=2)
            self.conv3 = L.Convolution2D(None, c(384), 3, pad=1)
            self.conv4 = L.Convolution2D(None, c(384), 3, pad=1)
            self.conv5 = L.Convolution2D(None, c(256), 3, pad=1)
            self.fc6 = L.Linear(None, c(4096))
            self.fc7 = L.Linear(None, c(4096))
            self.fc8 = L.Linear(None, n_class)

    def predict(self, x):
        h = F.max_pooling_2d(F.local_response_normalization(F.relu(self.conv1(x))), 3, stride=2)
        h = F.max_pooling_2d(F.local_response_normalization(F.relu(self.conv2(h))), 3, stride=2)
        h = F.relu(self.conv3(h))
        h = F.relu(self.conv4(h))
        h = F.max_pooling_2d(F.relu(self.conv5(h)), 3, stride=2)
        h = F.dropout(F.relu(self.fc6(h)))
        h = F.dropout(F.relu(self.fc7(h)))
        return self.fc8(h)


class NIN(_ImageNetModel):
    """Network in Network: mlpconv blocks and a global-average classifier."""

    insize = 227

    def __init__(self, n_class=1000, width=1.0):
        super().__init__()
        c = lambda n: _ch(n, width)  # noqa: E731
        w = chainer.initializers.HeNormal()
        with self.init_scope():
            self.mlpconv1 = L.MLPConvolution2D(None, (c(96), c(96), c(96)), 11, stride=4, conv_init=w)
            self.mlpconv2 = L.MLPConvolution2D(None, (c(256), c(256), c(256)), 5, pad=2, conv_init=w)
            self.mlpconv3 = L.MLPConvolution2D(None, (c(384), c(384), c(384)), 3, pad=1, conv_init=w)
            self.mlpconv4 = L.MLPConvolution2D(None, (c(1024), c(1024), n_class), 3, pad=1, conv_init=w)

    def predict(self, x):
        h = F.max_pooling_2d(F.relu(self.mlpconv1(x)), 3, stride=2)
        h = F.max_pooling_2d(F.relu(self.mlpconv2(h)), 3, stride=2)
        h = F.max_pooling_2d(F.relu(self.mlpconv3(h)), 3, stride=2)
        h = self.mlpconv4(F.dropout(h))
        return F.reshape(_global_average(h), (len(x), -1))


class GoogLeNetBN(_ImageNetModel):
    """GoogLeNet with batch normalization (Inception-BN) and two auxiliary classifiers.

    In training the loss is ``0.3 * aux1 + 0.3 * aux2 + main`` as in the
    original example; ``accuracy`` is the main classifier's.
    """

    insize = 224

    def __init__(self, n_class=1000, width=1.0):
        super().__init__()
        c = lambda n: _ch(n, width)  # noqa: E731
        with self.init_scope():
            self.conv1 = L.Convolution2D(None, c(64), 7, stride=2, pad=3, nobias=True)
            self.norm1 = L.BatchNormalization(c(64))
            self.conv2 = L.Convolution2D(None, c(192), 3, pad=1, nobias=True)
            self.norm2 = L.BatchNormalization(c(192))
            self.inc3a = L.InceptionBN(None, c(64), c(64), c(64), c(64), c(96), "avg", c(32))
            self.inc3b = L.InceptionBN(None, c(64), c(64), c(96), c(64), c(96), "avg", c(64))
            self.inc3c = L.InceptionBN(None, 0, c(128), c(160), c(64), c(96), "max", stride=2)
            self.inc4a = L.InceptionBN(None, c(224), c(64), c(96), c(96), c(128), "avg", c(128))
            self.inc4b = L.InceptionBN(None, c(192), c(96), c(128), c(96), c(128), "avg", c(128))
            self.inc4c = L.InceptionBN(None, c(128), c(128), c(160), c(128), c(160), "avg", c(128))
            self.inc4d = L.InceptionBN(None, c(64), c(128), c(192), c(160), c(192), "avg", c(128))
            self.inc4e = L.InceptionBN(None, 0, c(128), c(192), c(192), c(256), "max", stride=2)
            self.inc5a = L.InceptionBN(None, c(352), c(192), c(320), c(160), c(224), "avg", c(128))
            self.inc5b = L.InceptionBN(None, c(352), c(192), c(320), c(192), c(224), "max", c(128))
            self.out = L.Linear(None, n_class)

            self.conva = L.Convolution2D(None, c(128), 1, nobias=True)
            self.norma = L.BatchNormalization(c(128))
            self.lina = L.Linear(None, c(1024), nobias=True)
            self.norma2 = L.BatchNormalization(c(1024))
            self.outa = L.Linear(None, n_class)

            self.convb = L.Convolution2D(None, c(128), 1, nobias=True)
            self.normb = L.BatchNormalization(c(128))
            self.linb = L.Linear(None, c(1024), nobias=True)
            self.normb2 = L.BatchNormalization(c(1024))
            self.outb = L.Linear(None, n_class)

    def _trunk(self, x):
        h = F.max_pooling_2d(F.relu(self.norm1(self.conv1(x))), 3, stride=2, pad=1)
        h = F.max_pooling_2d(F.relu(self.norm2(self.conv2(h))), 3, stride=2, pad=1)
        h = self.inc3c(self.inc3b(self.inc3a(h)))
        a = h = self.inc4a(h)
        h = self.inc4c(self.inc4b(h))
        b = h = self.inc4d(h)
        h = self.inc5b(self.inc5a(self.inc4e(h)))
        return a, b, self.out(_global_average(h))

    def _aux(self, h, conv, norm, lin, norm2, out):
        h = F.average_pooling_2d(h, min(5, h.shape[2]), stride=3)
        h = F.relu(norm(conv(h)))
        h = F.relu(norm2(lin(h)))
        return out(h)

    def predict(self, x):
        return self._trunk(x)[2]

    def __call__(self, x, t):
        a, b, y = self._trunk(x)
        loss = F.softmax_cross_entropy(y, t)
        if chainer.config.train:
            ya = self._aux(a, self.conva, self.norma, self.lina, self.norma2, self.outa)
            yb = self._aux(b, self.convb, self.normb, self.linb, self.normb2, self.outb)
            loss = loss + 0.3 * (F.softmax_cross_entropy(ya, t) + F.softmax_cross_entropy(yb, t))
        chainer.report({"loss": loss, "accuracy": F.accuracy(y, t)}, self)
        return loss


class _Bottleneck(chainer.Chain):
    """1x1 -> 3x3 (strided) -> 1x1 with batch norm; a projection shortcut when shapes change."""

    def __init__(self, mid, out, stride, project):
        super().__init__()
        w = chainer.initializers.HeNormal()
        with self.init_scope():
            self.conv1 = L.Convolution2D(None, mid, 1, stride=stride, initialW=w, nobias=True)
            self.bn1 = L.BatchNormalization(mid)
            self.conv2 = L.Convolution2D(None, mid, 3, pad=1, initialW=w, nobias=True)
            self.bn2 = L.BatchNormalization(mid)
            self.conv3 = L.Convolution2D(None, out, 1, initialW=w, nobias=True)
            self.bn3 = L.BatchNormalization(out)
            if project:
                self.conv4 = L.Convolution2D(None, out, 1, stride=stride, initialW=w, nobias=True)
                self.bn4 = L.BatchNormalization(out)
        self.project = project

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        shortcut = self.bn4(self.conv4(x)) if self.project else x
        return F.relu(h + shortcut)


class _Stage(chainer.ChainList):
    def __init__(self, n_blocks, mid, out, stride):
        super().__init__(*[_Bottleneck(mid, out, stride if i == 0 else 1, project=(i == 0)) for i in range(n_blocks)])

    def forward(self, x):
        for block in self:
            x = block(x)
        return x


class ResNet50(_ImageNetModel):
    """ResNet-50: a 7x7 stem and four bottleneck stages of 3, 4, 6, 3 blocks."""

    insize = 224

    def __init__(self, n_class=1000, width=1.0):
        super().__init__()
        c = lambda n: _ch(n, width)  # noqa: E731
        with self.init_scope():
            self.conv1 = L.Convolution2D(
                None, c(64), 7, stride=2, pad=3, initialW=chainer.initializers.HeNormal(), nobias=True
            )
            self.bn1 = L.BatchNormalization(c(64))
            self.res2 = _Stage(3, c(64), c(256), 1)
            self.res3 = _Stage(4, c(128), c(512), 2)
            self.res4 = _Stage(6, c(256), c(1024), 2)
            self.res5 = _Stage(3, c(512), c(2048), 2)
            self.fc = L.Linear(None, n_class)

    def predict(self, x):
        h = F.max_pooling_2d(F.relu(self.bn1(self.conv1(x))), 3, stride=2)
        h = self.res5(self.res4(self.res3(self.res2(h))))
        return self.fc(_global_average(h))


# name -> class, for command lines and benchmarks that pick a model by name
ARCHS = {"alex": AlexNet, "nin": NIN, "googlenetbn": GoogLeNetBN, "resnet50": ResNet50}
