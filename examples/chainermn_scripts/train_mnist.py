#!/usr/bin/env python
"""Data-parallel MLP on MNIST-shaped generated data, written as ChainerMN's train_mnist.py example.

mpiexec -n 2 python train_mnist.py --epoch 3
"""

import argparse

import chainer
import chainer.functions as F
import chainer.links as L
import chainermn
import numpy as np
from chainer import training
from chainer.training import extensions


class MLP(chainer.Chain):
    def __init__(self, n_units, n_out):
        super(MLP, self).__init__()
        with self.init_scope():
            self.l1 = L.Linear(784, n_units)
            self.l2 = L.Linear(n_units, n_units)
            self.l3 = L.Linear(n_units, n_out)

    def forward(self, x):
        h1 = F.relu(self.l1(x))
        h2 = F.relu(self.l2(h1))
        return self.l3(h2)


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
    parser = argparse.ArgumentParser(description="ChainerMN example: MNIST")
    parser.add_argument("--batchsize", "-b", type=int, default=50)
    parser.add_argument("--communicator", type=str, default="naive")
    parser.add_argument("--epoch", "-e", type=int, default=3)
    parser.add_argument("--out", "-o", default="result")
    parser.add_argument("--unit", "-u", type=int, default=100)
    parser.add_argument("--n-train", type=int, default=1000)
    args = parser.parse_args()

    comm = chainermn.create_communicator(args.communicator)
    if comm.rank == 0:
        print("==========================================")
        print("Num process (COMM_WORLD): {}".format(comm.size))
        print("Using {} communicator".format(args.communicator))
        print("Num unit: {}".format(args.unit))
        print("Num Minibatch-size: {}".format(args.batchsize))
        print("Num epoch: {}".format(args.epoch))
        print("==========================================")

    model = L.Classifier(MLP(args.unit, 10))
    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm)
    optimizer.setup(model)

    # Split and distribute the dataset. Only worker 0 loads the whole dataset.
    if comm.rank == 0:
        train, test = generated_mnist(args.n_train, args.n_train // 5)
    else:
        train, test = None, None
    train = chainermn.scatter_dataset(train, comm, shuffle=True)
    test = chainermn.scatter_dataset(test, comm, shuffle=True)

    train_iter = chainer.iterators.SerialIterator(train, args.batchsize)
    test_iter = chainer.iterators.SerialIterator(test, args.batchsize, repeat=False, shuffle=False)

    updater = training.StandardUpdater(train_iter, optimizer)
    trainer = training.Trainer(updater, (args.epoch, "epoch"), out=args.out)

    # Create a multi node evaluator from a standard Chainer evaluator.
    evaluator = extensions.Evaluator(test_iter, model)
    evaluator = chainermn.create_multi_node_evaluator(evaluator, comm)
    trainer.extend(evaluator)

    # Some display and output extensions are necessary only for one worker.
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
