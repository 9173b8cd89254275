#!/usr/bin/env python
"""Model-parallel MLP over two ranks, written as ChainerMN's train_mnist_model_parallel.py example.

Rank 0 holds the first and last layers and the loss, rank 1 the middle layer:
rank 0 -> rank 1 -> rank 0 in the forward pass, the reverse in backward.

    mpiexec -n 2 python train_mnist_model_parallel.py --epoch 3
"""

import argparse

import chainer
import chainer.functions as F
import chainer.links as L
import chainermn
import chainermn.datasets
import chainermn.functions
import numpy as np
from chainer import training
from chainer.training import extensions


class MLP0SubA(chainer.Chain):
    def __init__(self, comm, n_out):
        super(MLP0SubA, self).__init__(l1=L.Linear(784, n_out))

    def forward(self, x):
        return F.relu(self.l1(x))


class MLP0SubB(chainer.Chain):
    def __init__(self, comm):
        super(MLP0SubB, self).__init__()

    def forward(self, y):
        return y  # the middle layer's output, received from rank 1


class MLP0(chainermn.MultiNodeChainList):
    # Model on worker 0.
    def __init__(self, comm, n_out):
        super(MLP0, self).__init__(comm=comm)
        self.add_link(MLP0SubA(comm, n_out), rank_in=None, rank_out=1)
        self.add_link(MLP0SubB(comm), rank_in=1, rank_out=None)


class MLP1Sub(chainer.Chain):
    def __init__(self, n_units, n_out):
        super(MLP1Sub, self).__init__(l2=L.Linear(None, n_units), l3=L.Linear(None, n_out))

    def forward(self, h0):
        h1 = F.relu(self.l2(h0))
        return self.l3(h1)


class MLP1(chainermn.MultiNodeChainList):
    # Model on worker 1.
    def __init__(self, comm, n_units, n_out):
        super(MLP1, self).__init__(comm=comm)
        self.add_link(MLP1Sub(n_units, n_out), rank_in=0, rank_out=0)


def generated_mnist(n_train, n_test, seed=0):
    """10 classes of 28x28 'digits': a fixed random prototype per class plus noise."""
    rng = np.random.RandomState(seed)
    prototypes = rng.rand(10, 784).astype(np.float32)

    def make(n):
        labels = rng.randint(0, 10, size=n).astype(np.int32)
        images = prototypes[labels] + 0.5 * rng.randn(n, 784).astype(np.float32)
        return chainer.datasets.TupleDataset(images, labels)

    return make(n_train), make(n_test)


def main():
    parser = argparse.ArgumentParser(description="ChainerMN example: pipelined neural network")
    parser.add_argument("--batchsize", "-b", type=int, default=50)
    parser.add_argument("--epoch", "-e", type=int, default=3)
    parser.add_argument("--out", "-o", default="result")
    parser.add_argument("--unit", "-u", type=int, default=100)
    parser.add_argument("--n-train", type=int, default=1000)
    args = parser.parse_args()

    # Prepare ChainerMN communicator.
    comm = chainermn.create_communicator("naive")
    if comm.size != 2:
        raise ValueError("This example can only be executed on exactly 2 processes.")

    if comm.rank == 0:
        print("==========================================")
        print("Num unit: {}".format(args.unit))
        print("Num Minibatch-size: {}".format(args.batchsize))
        print("Num epoch: {}".format(args.epoch))
        print("==========================================")

    if comm.rank == 0:
        model = L.Classifier(MLP0(comm, args.unit))
    elif comm.rank == 1:
        model = MLP1(comm, args.unit, 10)

    optimizer = chainer.optimizers.Adam()
    optimizer.setup(model)

    # Iterate dataset only on worker 0.
    train, test = generated_mnist(args.n_train, args.n_train // 5)
    if comm.rank == 1:
        train = chainermn.datasets.create_empty_dataset(train)
        test = chainermn.datasets.create_empty_dataset(test)

    train_iter = chainer.iterators.SerialIterator(train, args.batchsize, shuffle=False)
    test_iter = chainer.iterators.SerialIterator(test, args.batchsize, repeat=False, shuffle=False)

    updater = training.StandardUpdater(train_iter, optimizer)
    trainer = training.Trainer(updater, (args.epoch, "epoch"), out=args.out)
    trainer.extend(extensions.Evaluator(test_iter, model))

    # Some display and output extentions are necessary only for worker 0.
    if comm.rank == 0:
        trainer.extend(extensions.LogReport())
        trainer.extend(
            extensions.PrintReport(
                ["epoch", "main/loss", "validation/main/loss", "main/accuracy", "validation/main/accuracy"]
            )
        )

    trainer.run()


if __name__ == "__main__":
    main()
