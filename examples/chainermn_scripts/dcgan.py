#!/usr/bin/env python
"""Data-parallel DCGAN, written as ChainerMN's dcgan example (train_dcgan.py + net.py + updater.py).

Generated data: 8x8 one-channel images of a bright horizontal or vertical bar.
The generator and the discriminator each get a multi-node optimizer; every rank
trains on its shard from scatter_dataset.

    mpiexec -n 2 python dcgan.py --epoch 3
"""

import argparse

import chainer
import chainer.functions as F
import chainer.links as L
import chainermn
import numpy as np
from chainer import training
from chainer.training import extensions


class Generator(chainer.Chain):
    def __init__(self, n_hidden, ch=32):
        super(Generator, self).__init__()
        self.n_hidden = n_hidden
        self.ch = ch
        with self.init_scope():
            w = chainer.initializers.Normal(0.02)
            self.l0 = L.Linear(n_hidden, 2 * 2 * ch, initialW=w)
            self.dc1 = L.Deconvolution2D(ch, ch // 2, 4, 2, 1, initialW=w)
            self.dc2 = L.Deconvolution2D(ch // 2, 1, 4, 2, 1, initialW=w)
            self.bn0 = L.BatchNormalization(2 * 2 * ch)
            self.bn1 = L.BatchNormalization(ch // 2)

    def make_hidden(self, batchsize):
        return np.random.uniform(-1, 1, (batchsize, self.n_hidden, 1, 1)).astype(np.float32)

    def forward(self, z):
        h = F.reshape(F.relu(self.bn0(self.l0(z))), (len(z), self.ch, 2, 2))
        h = F.relu(self.bn1(self.dc1(h)))
        return F.sigmoid(self.dc2(h))


class Discriminator(chainer.Chain):
    def __init__(self, ch=32):
        super(Discriminator, self).__init__()
        with self.init_scope():
            w = chainer.initializers.Normal(0.02)
            self.c0 = L.Convolution2D(1, ch // 2, 4, 2, 1, initialW=w)
            self.c1 = L.Convolution2D(ch // 2, ch, 4, 2, 1, initialW=w)
            self.l2 = L.Linear(2 * 2 * ch, 1, initialW=w)

    def forward(self, x):
        h = F.leaky_relu(self.c0(x))
        h = F.leaky_relu(self.c1(h))
        return self.l2(h)


class DCGANUpdater(chainer.training.updaters.StandardUpdater):
    def __init__(self, *args, **kwargs):
        self.gen, self.dis = kwargs.pop("models")
        super(DCGANUpdater, self).__init__(*args, **kwargs)

    def loss_dis(self, dis, y_fake, y_real):
        batchsize = len(y_fake)
        L1 = F.sum(F.softplus(-y_real)) / batchsize
        L2 = F.sum(F.softplus(y_fake)) / batchsize
        loss = L1 + L2
        chainer.report({"loss": loss}, dis)
        return loss

    def loss_gen(self, gen, y_fake):
        batchsize = len(y_fake)
        loss = F.sum(F.softplus(-y_fake)) / batchsize
        chainer.report({"loss": loss}, gen)
        return loss

    def update_core(self):
        gen_optimizer = self.get_optimizer("gen")
        dis_optimizer = self.get_optimizer("dis")

        batch = self.get_iterator("main").next()
        x_real = chainer.Variable(self.converter(batch, self.device))
        xp = chainer.backend.get_array_module(x_real.array)

        gen, dis = self.gen, self.dis
        batchsize = len(batch)

        y_real = dis(x_real)
        z = chainer.Variable(xp.asarray(gen.make_hidden(batchsize)))
        x_fake = gen(z)
        y_fake = dis(x_fake)

        dis_optimizer.update(self.loss_dis, dis, y_fake, y_real)
        gen_optimizer.update(self.loss_gen, gen, y_fake)


def generated_bars(n, seed=0):
    """8x8 images with one bright horizontal or vertical bar, plus a little noise."""
    rng = np.random.RandomState(seed)
    images = 0.05 * rng.rand(n, 1, 8, 8).astype(np.float32)
    for i in range(n):
        k = rng.randint(8)
        if rng.rand() < 0.5:
            images[i, 0, k, :] = 1.0
        else:
            images[i, 0, :, k] = 1.0
    return images


def main():
    parser = argparse.ArgumentParser(description="ChainerMN example: DCGAN")
    parser.add_argument("--batchsize", "-b", type=int, default=32)
    parser.add_argument("--communicator", type=str, default="naive")
    parser.add_argument("--epoch", "-e", type=int, default=3)
    parser.add_argument("--n_hidden", "-n", type=int, default=16)
    parser.add_argument("--n-train", type=int, default=640)
    parser.add_argument("--out", "-o", default="result")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    comm = chainermn.create_communicator(args.communicator)
    if comm.rank == 0:
        print("==========================================")
        print("Num process (COMM_WORLD): {}".format(comm.size))
        print("Num Minibatch-size: {}".format(args.batchsize))
        print("Num epoch: {}".format(args.epoch))
        print("==========================================")

    np.random.seed(args.seed + comm.rank)  # each rank draws its own noise
    gen = Generator(n_hidden=args.n_hidden)
    dis = Discriminator()

    def make_optimizer(model, comm, alpha=0.0002, beta1=0.5):
        optimizer = chainermn.create_multi_node_optimizer(chainer.optimizers.Adam(alpha=alpha, beta1=beta1), comm)
        optimizer.setup(model)
        optimizer.add_hook(chainer.optimizer.WeightDecay(0.0001), "hook_dec")
        return optimizer

    print_checksums(comm, "initial", gen, dis)
    opt_gen = make_optimizer(gen, comm)
    opt_dis = make_optimizer(dis, comm)

    # Split and distribute the dataset. Only worker 0 loads the whole dataset.
    if comm.rank == 0:
        train = generated_bars(args.n_train)
    else:
        train = None
    train = chainermn.scatter_dataset(train, comm)
    train_iter = chainer.iterators.SerialIterator(train, args.batchsize)

    updater = DCGANUpdater(models=(gen, dis), iterator=train_iter, optimizer={"gen": opt_gen, "dis": opt_dis})
    trainer = training.Trainer(updater, (args.epoch, "epoch"), out=args.out)

    # Some display and output extensions are necessary only for one worker.
    if comm.rank == 0:
        trainer.extend(extensions.LogReport(trigger=(1, "epoch")))
        trainer.extend(extensions.PrintReport(["epoch", "iteration", "gen/loss", "dis/loss"]))

    trainer.run()
    print_checksums(comm, "final", gen, dis)


def print_checksums(comm, when, gen, dis):
    # Each rank starts from its own random weights; training must leave identical replicas.
    for name, model in (("gen", gen), ("dis", dis)):
        total = sum(float(np.abs(p.array).sum()) for _, p in sorted(model.namedparams()))
        print("rank {} {} {} checksum {:.6f}".format(comm.rank, when, name, total))


if __name__ == "__main__":
    main()
