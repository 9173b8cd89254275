#!/usr/bin/env python
"""The peer side of the mnist benchmark: ChainerMN's MNIST example against chainer's bundled chainermn.

Same model (mnframe.recipes.mnist.model.MLP), data (scikit-learn digits or local
MNIST, mnframe.recipes.mnist.data), optimizer (Adam), per-rank batch size and
scatter_dataset as ``python -m mnframe recipe=mnist``; no reporting
extensions, only the benchmark probe (bench/peer/probe.py).

    mpiexec -n 2 python bench/peer/train_mnist.py --iterations 200
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import bench.peer.numpy2  # noqa: E402,F401  (NumPy 2: before chainer)
import chainer  # noqa: E402
import chainer.links as L  # noqa: E402
from chainer import training  # noqa: E402
import chainermn  # noqa: E402  (the peer: chainer's bundled ChainerMN)

from bench.peer import probe  # noqa: E402
from mnframe.recipes.mnist.data import get_datasets  # noqa: E402
from mnframe.recipes.mnist.model import MLP  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batchsize", "-b", type=int, default=50, help="examples per rank and step")
    parser.add_argument("--iterations", "-i", type=int, default=200)
    parser.add_argument("--unit", "-u", type=int, default=1000)
    parser.add_argument("--communicator", default="naive")
    parser.add_argument("--source", default="digits", help="'digits' or 'mnist'")
    parser.add_argument("--path", default=None, help="local MNIST for --source mnist")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    comm = chainermn.create_communicator(args.communicator)
    chainer.global_config.autotune = False
    model = L.Classifier(MLP(args.unit, 10))
    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(), comm)
    optimizer.setup(model)

    train = get_datasets(args.source, args.path)[0] if comm.rank == 0 else None
    train = chainermn.scatter_dataset(train, comm, shuffle=True, seed=args.seed)
    train_iter = chainer.iterators.SerialIterator(train, args.batchsize)

    updater = training.StandardUpdater(train_iter, optimizer, device=-1)
    out = args.out or tempfile.mkdtemp(prefix="peer_mnist_")
    trainer = training.Trainer(updater, (args.iterations, "iteration"), out=out)
    probe.add_to(trainer, comm, warmup=args.warmup, label="peer")
    trainer.run()


if __name__ == "__main__":
    main()
