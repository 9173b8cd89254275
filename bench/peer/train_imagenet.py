#!/usr/bin/env python
"""The peer side of the imagenet benchmark: ChainerMN's ImageNet example against chainer's bundled chainermn.

Same models (mnframe.recipes.imagenet.models), data (mnframe.recipes.imagenet.data, synthetic
images by default), optimizer (MomentumSGD lr=0.01, momentum 0.9, weight decay
1e-4) and per-rank batch size as ``python -m mnframe recipe=imagenet``. As in
the example, rank 0 builds the dataset and ``scatter_dataset`` sends each rank
its part (here a small dataset object: images are generated or read per
example). Only the benchmark probe is added to the trainer.

    mpiexec -n 2 python bench/peer/train_imagenet.py --arch nin --insize 64 --iterations 50
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import bench.peer.numpy2  # noqa: E402,F401  (NumPy 2: before chainer)
import chainer  # noqa: E402
from chainer import training  # noqa: E402
import chainermn  # noqa: E402  (the peer: chainer's bundled ChainerMN)

from bench.peer import probe  # noqa: E402
from mnframe.recipes.imagenet.data import get_datasets  # noqa: E402
from mnframe.recipes.imagenet.models import ARCHS  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", "-a", choices=sorted(ARCHS), default="nin")
    parser.add_argument("--batchsize", "-b", type=int, default=32, help="examples per rank and step")
    parser.add_argument("--iterations", "-i", type=int, default=50)
    parser.add_argument("--insize", type=int, default=None, help="crop size (default: the model's)")
    parser.add_argument("--width", type=float, default=1.0, help="channel multiplier of the model")
    parser.add_argument("--n-class", type=int, default=1000)
    parser.add_argument("--n-synthetic", type=int, default=256)
    parser.add_argument("--train", default=None, help="file list (omit for synthetic images)")
    parser.add_argument("--root", default=".")
    parser.add_argument("--mean", default=None)
    parser.add_argument("--loader", choices=("serial", "multiprocess"), default="serial")
    parser.add_argument("--loaderjob", "-j", type=int, default=None)
    parser.add_argument("--communicator", default="naive")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    comm = chainermn.create_communicator(args.communicator)
    chainer.global_config.autotune = False
    cls = ARCHS[args.arch]
    insize = args.insize or cls.insize
    model = cls(n_class=args.n_class, width=args.width)
    optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.MomentumSGD(lr=0.01, momentum=0.9), comm)
    optimizer.setup(model)
    optimizer.add_hook(chainer.optimizer_hooks.WeightDecay(0.0001))

    if comm.rank == 0:
        train, _ = get_datasets(
            train=args.train,
            val=args.train,
            root=args.root,
            mean=args.mean,
            synthetic=args.train is None,
            n_synthetic=args.n_synthetic,
            insize=insize,
            n_class=args.n_class,
        )
    else:
        train = None
    train = chainermn.scatter_dataset(train, comm, shuffle=True, seed=args.seed)
    if args.loader == "multiprocess":
        train_iter = chainer.iterators.MultiprocessIterator(train, args.batchsize, n_processes=args.loaderjob)
    else:
        train_iter = chainer.iterators.SerialIterator(train, args.batchsize)

    updater = training.StandardUpdater(train_iter, optimizer, device=-1)
    out = args.out or tempfile.mkdtemp(prefix="peer_imagenet_")
    trainer = training.Trainer(updater, (args.iterations, "iteration"), out=out)
    probe.add_to(trainer, comm, warmup=args.warmup, label="peer")
    trainer.run()


if __name__ == "__main__":
    main()
