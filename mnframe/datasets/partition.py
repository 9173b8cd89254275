"""Which examples each rank gets: the index ranges of ChainerMN's scatter_dataset.

Pure functions, no MPI, so the partition rules can be unit-tested on their own.
With ``force_equal_length=True`` every rank gets ``ceil(n / size)`` examples
(neighbouring shards overlap a little, as in ChainerMN); with ``False`` the
ranges tile ``[0, n)`` exactly and the first ``n % size`` ranks get one more.
"""

import numpy as np


def shard_ranges(n_total_samples, size, force_equal_length=True):
    """``[(begin, end)] * size``: the half-open range of positions of each rank."""
    if size <= 0:
        raise ValueError(f"communicator size must be positive, got {size}")
    if n_total_samples < 0:
        raise ValueError(f"n_total_samples must be >= 0, got {n_total_samples}")
    n = n_total_samples
    if force_equal_length:
        length = -(-n // size)  # ceil; the last range still ends at n
        return [(n * i // size, n * i // size + length) for i in range(size)]
    ranges, begin = [], 0
    for i in range(size):
        end = begin + n // size + (1 if i < n % size else 0)
        ranges.append((begin, end))
        begin = end
    return ranges


def permutation(n_total_samples, shuffle, seed):
    """The order positions map to examples: ChainerMN's ``RandomState(seed).permutation``.

    ``None`` means the identity (no shuffle); the same seed gives the same order
    as the peer, so a seeded run puts every example on the same rank as ChainerMN.
    """
    if not shuffle:
        return None
    return np.random.RandomState(seed).permutation(n_total_samples)


def shard_indices(order, begin, end):
    """Example indices of one shard: a slice when unshuffled, else ``order[begin:end]``."""
    if order is None:
        return slice(begin, end)
    return order[begin:end]


def iter_shard_ranges(n_total_samples, size, force_equal_length):
    """``(rank, begin, end)`` for each rank: ChainerMN's private ``scatter._scatter_index`` generator."""
    for rank, (begin, end) in enumerate(shard_ranges(n_total_samples, size, force_equal_length)):
        yield rank, begin, end
