#!/usr/bin/env python
"""Channel-parallel convolution, written as ChainerMN's parallel_convolution example.

Each rank holds a share of every ParallelConvolution2D's output channels,
computes them on the full input and allgathers the shares
(chainermn.functions.allgather), so the layer's output is the whole feature
map on every rank. The classifier head is replicated: every rank sees the same
batch (create_multi_node_iterator) and starts from rank 0's head weights.

    mpiexec -n 2 python parallel_convolution.py --epoch 3
"""

import argparse

import chainer
import chainer.functions as F
import chainer.links as L
import chainermn
import chainermn.functions
import numpy as np
from chainer import training
from chainer.training import extensions


class ParallelConvolution2D(chainer.links.Convolution2D):
    def __init__(self, comm, in_channels, out_channels, *args, **kwargs):
        self.comm = comm
        self.in_channels = in_channels
        self.out_channels = out_channels
        super(ParallelConvolution2D, self).__init__(in_channels, self._out_channel_size, *args, **kwargs)

    def forward(self, x):
        y = super(ParallelConvolution2D, self).forward(x)
        ys = chainermn.functions.allgather(self.comm, y)
        return F.concat(ys, axis=1)

    @property
    def _out_channel_size(self):
        # Rank i holds n // size channels, plus one of the remainder for the first ranks.
        n, size, rank = self.out_channels, self.comm.size, self.comm.rank
        return n // size + (1 if rank < n % size else 0)


class Head(chainer.Chain):
    def __init__(self, n_out):
        super(Head, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(None, 32)
            self.l2 = L.Linear(32, n_out)

    def forward(self, h):
        return self.l2(F.relu(self.l1(h)))


class ParallelCNN(chainer.Chain):
    def __init__(self, comm, n_out):
        super(ParallelCNN, self).__init__()
        with self.init_scope():
            self.conv1 = ParallelConvolution2D(comm, 3, 16, 3, pad=1)
            self.conv2 = ParallelConvolution2D(comm, 16, 16, 3, pad=1)
            self.head = Head(n_out)

    def forward(self, x):
        h = F.relu(self.conv1(x))
        h = F.max_pooling_2d(F.relu(self.conv2(h)), 2)
        return self.head(h)


def generated_images(n_train, n_test, n_class, seed=0):
    """3x8x8 images: a class-specific colour pattern plus noise."""
    rng = np.random.RandomState(seed)
    patterns = rng.rand(n_class, 3, 8, 8).astype(np.float32)

    def make(n):
        labels = rng.randint(0, n_class, size=n).astype(np.int32)
        images = patterns[labels] + 0.4 * rng.randn(n, 3, 8, 8).astype(np.float32)
        return chainer.datasets.TupleDataset(images, labels)

    return make(n_train), make(n_test)


def main():
    parser = argparse.ArgumentParser(description="ChainerMN example: parallel convolution")
    parser.add_argument("--batchsize", "-b", type=int, default=32)
    parser.add_argument("--epoch", "-e", type=int, default=3)
    parser.add_argument("--n-train", type=int, default=480)
    parser.add_argument("--out", "-o", default="result")
    args = parser.parse_args()

    comm = chainermn.create_communicator("naive")
    if comm.rank == 0:
        print("==========================================")
        print("Num process (COMM_WORLD): {}".format(comm.size))
        print("Num Minibatch-size: {}".format(args.batchsize))
        print("Num epoch: {}".format(args.epoch))
        print("==========================================")

    n_class = 4
    model = L.Classifier(ParallelCNN(comm, n_class))
    train, test = generated_images(args.n_train, args.n_train // 4, n_class)
    model(*[np.asarray(a) for a in chainer.dataset.concat_examples(train[:2])])  # initialise the lazy head
    comm.bcast_data(model.predictor.head)  # the replicated part starts equal everywhere

    optimizer = chainer.optimizers.Adam()
    optimizer.setup(model)

    # Every process must see the same batch: process 0 iterates and broadcasts it.
    train_iter = chainermn.iterators.create_multi_node_iterator(
        chainer.iterators.SerialIterator(train, args.batchsize), comm
    )
    test_iter = chainermn.iterators.create_multi_node_iterator(
        chainer.iterators.SerialIterator(test, args.batchsize, repeat=False, shuffle=False), comm
    )

    updater = training.StandardUpdater(train_iter, optimizer)
    trainer = training.Trainer(updater, (args.epoch, "epoch"), out=args.out)
    trainer.extend(extensions.Evaluator(test_iter, model))

    if comm.rank == 0:
        trainer.extend(extensions.LogReport())
        trainer.extend(
            extensions.PrintReport(
                ["epoch", "main/loss", "validation/main/loss", "main/accuracy", "validation/main/accuracy"]
            )
        )

    trainer.run()

    head = model.predictor.head
    total = sum(float(np.abs(p.array).sum()) for _, p in sorted(head.namedparams()))
    print("rank {} head checksum {:.6f}".format(comm.rank, total))


if __name__ == "__main__":
    main()
