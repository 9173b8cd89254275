"""A generated toy translation task for the seq2seq recipe: reverse a digit sequence.

Sources are random sequences of ``length`` symbols (ids 2 .. n_symbols + 1; id
0 is end-of-sequence, id 1 is reserved for unknown words as in the example);
the target of each is the same sequence reversed. All sequences have the same
length so the default converter batches them into (batch, length) int32
arrays. The data is a pure function of ``seed``: every rank generates the same.
"""

import numpy as np
from chainer.datasets import TupleDataset

EOS, UNK, FIRST_SYMBOL = 0, 1, 2


def vocab_size(n_symbols):
    """Size of the source and target vocabularies (symbols + EOS + UNK)."""
    return n_symbols + FIRST_SYMBOL


def get_datasets(n_train=2000, n_test=200, length=8, n_symbols=10, seed=0):
    """Return ``(train, test)`` TupleDatasets of (source, target) int32 sequences."""
    if length < 1 or n_symbols < 1:
        raise ValueError(f"length and n_symbols must be positive (got length={length}, n_symbols={n_symbols})")
    rng = np.random.RandomState(seed)
    src = rng.randint(FIRST_SYMBOL, FIRST_SYMBOL + n_symbols, size=(n_train + n_test, length)).astype(np.int32)
    tgt = np.ascontiguousarray(src[:, ::-1])
    return TupleDataset(src[:n_train], tgt[:n_train]), TupleDataset(src[n_train:], tgt[n_train:])
