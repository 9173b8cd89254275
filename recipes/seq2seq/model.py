"""A model-parallel LSTM encoder/decoder (ChainerMN's seq2seq example, on a toy task).

The encoder runs on one rank and the decoder on another; both see the same
batches (the multi-node iterator shares rank 0's batches), as in ChainerMN's
``seq2seq_mp1.py``. The encoder sends its final LSTM states (h and c stacked
into one array, so one ``send`` carries both) to the decoder rank with
``mnframe.functions.send`` and returns the delegate variable as its "loss":
the updater's ``backward()`` on it receives the gradient of the states from
the decoder. The decoder receives the states with ``mnframe.functions.recv``,
decodes the target (teacher forcing) and returns the loss, reporting ``loss``,
``perp`` and ``accuracy`` (per token).

The communication is inside the chains (like the example's multi-node
NStepLSTM), so each rank's model is one stage without ``rank_in``/``rank_out``.
``comm`` is the communicator holding both ranks; the runner passes this rank's
model-parallel group, so with several replicas each encoder talks to the
decoder of its own group (``encoder_rank``/``decoder_rank`` are ranks of
``comm``).
"""

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np


def _embed_rows(embed, rows):
    """Embed a list of 1-D id arrays with one EmbedID call; returns a list of (len, units)."""
    lengths = [len(r) for r in rows]
    embedded = embed(F.concat(rows, axis=0))
    return F.split_axis(embedded, np.cumsum(lengths[:-1]), 0, force_tuple=True)


def _rows(x):
    """A (batch, length) array or a list of sequences -> a list of 1-D arrays."""
    return [row for row in x]


class Encoder(chainer.Chain):
    """Source ids -> final LSTM states, sent to ``decoder_rank``; returns the delegate variable."""

    # both ranks' classes get the same model keys from the config: this one does not need n_target_vocab
    def __init__(self, comm, n_layers=1, n_source_vocab=12, n_target_vocab=12, n_units=32, decoder_rank=1, dropout=0.1):  # noqa: ARG002
        super().__init__()
        self.comm, self.decoder_rank = comm, decoder_rank
        with self.init_scope():
            self.embed_x = L.EmbedID(n_source_vocab, n_units)
            self.lstm = L.NStepLSTM(n_layers, n_units, n_units, dropout)

    def forward(self, xs, _ys=None):
        from mnframe import functions as mnf

        exs = _embed_rows(self.embed_x, [x[::-1] for x in _rows(xs)])  # reversed source, as in the example
        hy, cy, _ = self.lstm(None, None, exs)
        states = F.concat((hy, cy), axis=0)  # (2 * n_layers, batch, units)
        return mnf.send(states, self.comm, rank=self.decoder_rank)


class Decoder(chainer.Chain):
    """Receives the encoder's states from ``encoder_rank`` and decodes the target sequence."""

    # both ranks' classes get the same model keys from the config: this one does not need n_source_vocab
    def __init__(self, comm, n_layers=1, n_source_vocab=12, n_target_vocab=12, n_units=32, encoder_rank=0, dropout=0.1):  # noqa: ARG002
        super().__init__()
        self.comm, self.encoder_rank = comm, encoder_rank
        with self.init_scope():
            self.embed_y = L.EmbedID(n_target_vocab, n_units)
            self.lstm = L.NStepLSTM(n_layers, n_units, n_units, dropout)
            self.W = L.Linear(n_units, n_target_vocab)

    def forward(self, _xs, ys):
        from mnframe import functions as mnf

        ys = _rows(ys)
        eos = self.xp.zeros(1, np.int32)
        ys_in = [F.concat((eos, y), axis=0) for y in ys]
        ys_out = F.concat([F.concat((y, eos), axis=0) for y in ys], axis=0)

        states = mnf.recv(self.comm, rank=self.encoder_rank)
        hx, cx = F.split_axis(states, 2, axis=0)
        _, _, os = self.lstm(hx, cx, _embed_rows(self.embed_y, ys_in))
        logits = self.W(F.concat(os, axis=0))
        batch = len(ys)
        loss = F.sum(F.softmax_cross_entropy(logits, ys_out, reduce="no")) / batch
        n_words = ys_out.shape[0]
        chainer.report(
            {"loss": loss, "perp": self.xp.exp(loss.array * batch / n_words), "accuracy": F.accuracy(logits, ys_out)},
            self,
        )
        return loss
