#!/usr/bin/env python
"""Model-parallel seq2seq (encoder on rank 0, decoder on rank 1), written as ChainerMN's seq2seq_mp1.py example.

The task is generated: translate a random token sequence into its reverse. The
encoder's final LSTM states go from rank 0 to rank 1 through
create_multi_node_n_step_rnn; both ranks see the same batches through
create_multi_node_iterator.

    mpiexec -n 2 python seq2seq.py --epoch 4
"""

import argparse

import chainer
import chainer.functions as F
import chainer.links as L
import chainermn
import chainermn.links
import numpy as np
from chainer import training
from chainer.training import extensions

EOS = 0


def sequence_embed(embed, xs):
    x_len = [len(x) for x in xs]
    x_section = np.cumsum(x_len[:-1])
    ex = embed(F.concat(xs, axis=0))
    return F.split_axis(ex, x_section, 0, force_tuple=True)


class Encoder(chainer.Chain):
    def __init__(self, comm, n_layers, n_source_vocab, n_units):
        super(Encoder, self).__init__()
        with self.init_scope():
            self.embed_x = L.EmbedID(n_source_vocab, n_units)
            # Corresponding decoder LSTM will be invoked on process 1.
            self.mn_encoder = chainermn.links.create_multi_node_n_step_rnn(
                L.NStepLSTM(n_layers, n_units, n_units, 0.1), comm, rank_in=None, rank_out=1
            )

    def forward(self, xs, ys):
        exs = sequence_embed(self.embed_x, xs)
        # The encoder's last states are sent to the decoder; backward starts from the delegate.
        _, _, _, delegate_variable = self.mn_encoder(exs)
        return delegate_variable


class Decoder(chainer.Chain):
    def __init__(self, comm, n_layers, n_target_vocab, n_units):
        super(Decoder, self).__init__()
        with self.init_scope():
            self.embed_y = L.EmbedID(n_target_vocab, n_units)
            # Corresponding encoder LSTM will be invoked on process 0.
            self.mn_decoder = chainermn.links.create_multi_node_n_step_rnn(
                L.NStepLSTM(n_layers, n_units, n_units, 0.1), comm, rank_in=0, rank_out=None
            )
            self.W = L.Linear(n_units, n_target_vocab)

    def forward(self, xs, ys):
        eos = self.xp.array([EOS], np.int32)
        ys_in = [F.concat([eos, y], axis=0) for y in ys]
        ys_out = [F.concat([y, eos], axis=0) for y in ys]
        eys = sequence_embed(self.embed_y, ys_in)
        batch = len(ys)
        # The initial states come from the encoder on process 0.
        _, _, os, _ = self.mn_decoder(eys)
        concat_os = F.concat(os, axis=0)
        concat_ys_out = F.concat(ys_out, axis=0)
        loss = F.sum(F.softmax_cross_entropy(self.W(concat_os), concat_ys_out, reduce="no")) / batch
        chainer.report({"loss": loss}, self)
        return loss


def convert(batch, device):
    return {"xs": [np.asarray(x) for x, _ in batch], "ys": [np.asarray(y) for _, y in batch]}


def generated_pairs(n, vocab, seed=0):
    """(source, reversed source) pairs of 3 to 6 tokens in 1..vocab-1 (0 is EOS)."""
    rng = np.random.RandomState(seed)
    pairs = []
    for _ in range(n):
        x = rng.randint(1, vocab, size=rng.randint(3, 7)).astype(np.int32)
        pairs.append((x, x[::-1].copy()))
    return pairs


def main():
    parser = argparse.ArgumentParser(description="ChainerMN example: seq2seq (model parallel)")
    parser.add_argument("--batchsize", "-b", type=int, default=32)
    parser.add_argument("--epoch", "-e", type=int, default=4)
    parser.add_argument("--unit", "-u", type=int, default=32)
    parser.add_argument("--layer", "-l", type=int, default=1)
    parser.add_argument("--vocab", type=int, default=10)
    parser.add_argument("--n-train", type=int, default=480)
    parser.add_argument("--out", "-o", default="result")
    args = parser.parse_args()

    comm = chainermn.create_communicator("naive")
    if comm.size != 2:
        raise ValueError("This example can only be executed on exactly 2 processes.")

    train = generated_pairs(args.n_train, args.vocab)
    if comm.rank == 0:
        model = Encoder(comm, args.layer, args.vocab, args.unit)
    elif comm.rank == 1:
        model = Decoder(comm, args.layer, args.vocab, args.unit)

    optimizer = chainer.optimizers.Adam()
    optimizer.setup(model)

    # Both processes must see the same batch: process 0 iterates and broadcasts it.
    train_iter = chainer.iterators.SerialIterator(train, args.batchsize)
    train_iter = chainermn.iterators.create_multi_node_iterator(train_iter, comm)

    updater = training.StandardUpdater(train_iter, optimizer, converter=convert)
    trainer = training.Trainer(updater, (args.epoch, "epoch"), out=args.out)

    # The loss is computed on process 1, so it reports.
    if comm.rank == 1:
        trainer.extend(extensions.LogReport(trigger=(1, "epoch")))
        trainer.extend(extensions.PrintReport(["epoch", "iteration", "main/loss", "elapsed_time"]))

    trainer.run()


if __name__ == "__main__":
    main()
