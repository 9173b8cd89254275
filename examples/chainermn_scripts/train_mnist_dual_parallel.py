#!/usr/bin/env python
"""Data and model parallel at once, written as ChainerMN's train_mnist_dual_parallel.py example.

The world is split into pairs of ranks (model_comm); each pair runs the
two-rank model-parallel MLP, and the pairs are data-parallel replicas whose
gradients are averaged over data_comm (the ranks holding the same stage).

    mpiexec -n 4 python train_mnist_dual_parallel.py --epoch 3
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
    parser = argparse.ArgumentParser(description="ChainerMN example: dual parallelism")
    parser.add_argument("--batchsize", "-b", type=int, default=50)
    parser.add_argument("--communicator", type=str, default="naive")
    parser.add_argument("--epoch", "-e", type=int, default=3)
    parser.add_argument("--out", "-o", default="result")
    parser.add_argument("--unit", "-u", type=int, default=100)
    parser.add_argument("--n-train", type=int, default=1000)
    args = parser.parse_args()

    # Prepare ChainerMN communicator.
    comm = chainermn.create_communicator(args.communicator)
    if comm.size % 2 != 0:
        raise ValueError("This example can only be executed on the even number of processes.")

    data_axis, model_axis = comm.rank % 2, comm.rank // 2
    data_comm = comm.split(data_axis, comm.rank)
    model_comm = comm.split(model_axis, comm.rank)

    if comm.rank == 0:
        print("==========================================")
        print("Num process (COMM_WORLD): {}".format(comm.size))
        print("Num unit: {}".format(args.unit))
        print("Num Minibatch-size: {}".format(args.batchsize))
        print("Num epoch: {}".format(args.epoch))
        print("==========================================")

    if data_axis == 0:
        model = L.Classifier(MLP0(model_comm, args.unit))
    elif data_axis == 1:
        model = MLP1(model_comm, args.unit, 10)

    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), data_comm)
    optimizer.setup(model)

    # Original dataset on worker 0 and 1.
    # Datasets of worker 0 and 1 are split and distributed to all workers.
    if model_axis == 0:
        train, test = generated_mnist(args.n_train, args.n_train // 5)
        if data_axis == 1:
            train = chainermn.datasets.create_empty_dataset(train)
            test = chainermn.datasets.create_empty_dataset(test)
    else:
        train, test = None, None
    train = chainermn.scatter_dataset(train, data_comm, shuffle=True)
    test = chainermn.scatter_dataset(test, data_comm, shuffle=True)

    train_iter = chainer.iterators.SerialIterator(train, args.batchsize, shuffle=False)
    test_iter = chainer.iterators.SerialIterator(test, args.batchsize, repeat=False, shuffle=False)

    updater = training.StandardUpdater(train_iter, optimizer)
    trainer = training.Trainer(updater, (args.epoch, "epoch"), out=args.out)
    evaluator = extensions.Evaluator(test_iter, model)
    evaluator = chainermn.create_multi_node_evaluator(evaluator, data_comm)
    trainer.extend(evaluator)

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
