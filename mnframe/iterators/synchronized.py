"""create_synchronized_iterator: every rank shuffles its own data in the same order.

Rank 0 draws a seed and broadcasts it; each rank's iterator gets a
``ShuffleOrderSampler`` built on that seed, so the ranks visit the same
positions of their (equal-length) datasets in the same order without sending
any batch. The wrapper forwards everything else to the real iterator.
"""

import chainer
import numpy as np

from mnframe.iterators import start_method
from mnframe.iterators.forwarding import ForwardingIterator
from mnframe.runtime import oplog


class _SynchronizedIterator(ForwardingIterator):
    """The real iterator with a shuffle order shared by all ranks."""

    def __init__(self, actual_iterator, communicator):
        if not hasattr(actual_iterator, "order_sampler"):
            raise ValueError(
                f"create_synchronized_iterator: {type(actual_iterator).__name__} has no order_sampler; "
                "use chainer.iterators.SerialIterator or MultiprocessIterator"
            )
        self.__dict__["actual_iterator"] = actual_iterator
        self.__dict__["communicator"] = communicator
        start_method.prepare(actual_iterator)
        seed = int(np.random.randint(0, 2**32 - 1, dtype=np.int64)) if communicator.rank == 0 else None
        with oplog.op("synchronized_iterator.seed", peer=0):
            seed = communicator.mpi_comm.bcast(seed, root=0)
        actual_iterator.order_sampler = chainer.iterators.ShuffleOrderSampler(np.random.RandomState(seed))
        actual_iterator.reset()

    def __next__(self):
        return self.actual_iterator.__next__()

    next = __next__


def create_synchronized_iterator(actual_iterator, communicator):
    """Wrap ``actual_iterator`` so all ranks share its shuffle order (collective)."""
    chainer.utils.experimental("mnframe.iterators.create_synchronized_iterator")
    return _SynchronizedIterator(actual_iterator, communicator)
