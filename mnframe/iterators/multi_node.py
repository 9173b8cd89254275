"""create_multi_node_iterator: every rank iterates the master rank's batches.

For model parallelism (an encoder on one rank, a decoder on another) all ranks
need the same batch. The master runs the real iterator and broadcasts each
batch together with the iterator's state; the followers return that batch and
mirror the state, so ``epoch``, ``is_new_epoch``, ``epoch_detail``,
``previous_epoch_detail`` and ``current_position`` agree on every rank.

Batches travel as pickled objects, so every example keeps its type, dtype and
shape (ChainerMN casts everything to float32). Examples must be numeric data,
as in ChainerMN: an array or NumPy scalar, a Python number, or a tuple/list of
those (ChainerMN: an array or a pair); any other example (a string, a dict, ...)
raises TypeError on every rank. An error in the master's iterator is broadcast
and raised on every rank.

``serialize`` does no communication (so a rank-0-only snapshot cannot
deadlock): the master serializes the real iterator, a follower writes and reads
the same keys from its mirrored state -- including the master's current shuffle
``order``, which travels with the first batch after it changes (start, new
epoch, reset, load). So a follower's state, too, loads into a plain
``SerialIterator``/``MultiprocessIterator`` (which require ``order`` when they
shuffle: without it they raise ``KeyError: '_order'``). A loaded ``order`` does
not change what a follower yields: it always returns the master's batches.
"""

import numbers

import chainer
from chainer.dataset import iterator as iterator_module

from mnframe.iterators import start_method
from mnframe.iterators.forwarding import ForwardingIterator
from mnframe.runtime import oplog

_STOP, _BATCH, _ERROR, _INVALID = "stop", "batch", "error", "invalid"
_UNSENT = object()  # the followers' copy of the order is out of date


def _order_of(it):
    """The iterator's current shuffle order (Chainer's Serial/Multiprocess/MultithreadIterator), or None."""
    return getattr(getattr(it, "_state", None), "order", None)


def _state_of(it):
    return {
        "epoch": it.epoch,
        "is_new_epoch": it.is_new_epoch,
        "epoch_detail": it.epoch_detail,
        "previous_epoch_detail": getattr(it, "previous_epoch_detail", None),
        "current_position": getattr(it, "current_position", 0),
    }


def _is_numeric(example):
    """An array or NumPy scalar (anything with a dtype), a Python number, or a tuple/list of those."""
    if hasattr(example, "dtype") or isinstance(example, numbers.Number):
        return True
    return isinstance(example, (tuple, list)) and all(_is_numeric(item) for item in example)


def _invalid_type(batch):
    """None when every example of ``batch`` is numeric data, else the TypeError message."""
    for i, example in enumerate(batch):
        if not _is_numeric(example):
            return (
                f"multi-node iterator: example {i} of the batch is a {type(example).__name__}; it sends arrays, "
                f"numbers and tuples of them only (as ChainerMN): convert the dataset's examples to arrays"
            )
    return None


class _MasterIterator(ForwardingIterator):
    """The master side: the real iterator plus a broadcast of every batch."""

    def __init__(self, actual_iterator, communicator, rank_master):
        d = self.__dict__
        d["actual_iterator"] = actual_iterator
        d["communicator"] = communicator
        d["rank_master"] = rank_master
        d["_sent_order"] = _UNSENT  # the order array the followers mirror
        info = {
            "dataset_size": len(actual_iterator.dataset) if hasattr(actual_iterator, "dataset") else None,
            "batch_size": getattr(actual_iterator, "batch_size", None),
            "state": self._state_to_send(),
        }
        with oplog.op("multi_node_iterator.init", peer=rank_master):
            communicator.mpi_comm.bcast(info, root=rank_master)

    def _state_to_send(self):
        """The mirrored state, plus the shuffle order when the followers do not have it yet.

        A new epoch, ``reset`` or a fresh iterator replaces the order array; a
        load copies into it, so ``serialize`` forgets what was sent.
        """
        it = self.actual_iterator
        state = _state_of(it)
        order = _order_of(it)
        if order is not self._sent_order or it.is_new_epoch:
            state["order"] = None if order is None else order.copy()
            self.__dict__["_sent_order"] = order
        return state

    def serialize(self, serializer):
        self.actual_iterator.serialize(serializer)
        if isinstance(serializer, chainer.serializer.Deserializer):
            self.__dict__["_sent_order"] = _UNSENT  # loading copies into the order array: send it again

    def __next__(self):
        try:
            batch = self.actual_iterator.__next__()
            message = (_BATCH, batch, self._state_to_send())
        except StopIteration:
            message = (_STOP, None, self._state_to_send())
            batch = None
        except Exception as e:  # the followers are waiting for this batch: tell them
            self._bcast((_ERROR, f"{type(e).__name__}: {e}", None))
            raise
        invalid = None if batch is None else _invalid_type(batch)
        if invalid is not None:
            message = (_INVALID, invalid, message[2])
        self._bcast(message)
        if message[0] == _STOP:
            raise StopIteration
        if invalid is not None:
            raise TypeError(invalid)
        return batch

    next = __next__

    def _bcast(self, message):
        with oplog.op("multi_node_iterator.batch", peer=self.rank_master):
            self.communicator.mpi_comm.bcast(message, root=self.rank_master)


class _FollowerIterator(iterator_module.Iterator):
    """A non-master rank: returns the master's batches and mirrors its state."""

    def __init__(self, communicator, rank_master):
        self.communicator = communicator
        self.rank_master = rank_master
        with oplog.op("multi_node_iterator.init", peer=rank_master):
            info = communicator.mpi_comm.bcast(None, root=rank_master)
        self.dataset_size = info["dataset_size"]
        self.batch_size = info["batch_size"]
        self._order = None  # the master's current shuffle order (None: no shuffling)
        self._set_state(info["state"])

    def _set_state(self, state):
        self.epoch = state["epoch"]
        self.is_new_epoch = state["is_new_epoch"]
        self._epoch_detail = state["epoch_detail"]
        self._previous_epoch_detail = state["previous_epoch_detail"]
        self.current_position = state["current_position"]
        if "order" in state:
            self._order = state["order"]

    def __next__(self):
        with oplog.op("multi_node_iterator.batch", peer=self.rank_master):
            kind, payload, state = self.communicator.mpi_comm.bcast(None, root=self.rank_master)
        if kind == _ERROR:
            raise RuntimeError(f"multi-node iterator: the master rank {self.rank_master}'s iterator failed: {payload}")
        self._set_state(state)
        if kind == _STOP:
            raise StopIteration
        if kind == _INVALID:
            raise TypeError(payload)
        return payload

    next = __next__

    @property
    def epoch_detail(self):
        return self._epoch_detail

    @property
    def previous_epoch_detail(self):
        return self._previous_epoch_detail

    def reset(self):
        """The master resets the data; here only the mirrored state restarts."""
        self._set_state(
            {
                "epoch": 0,
                "is_new_epoch": False,
                "epoch_detail": 0.0,
                "previous_epoch_detail": None,
                "current_position": 0,
            }
        )

    def serialize(self, serializer):
        # the same keys as chainer's SerialIterator, so either rank's file can be loaded here
        self.current_position = serializer("current_position", self.current_position)
        self.epoch = serializer("epoch", self.epoch)
        self.is_new_epoch = serializer("is_new_epoch", self.is_new_epoch)
        previous = self._previous_epoch_detail
        try:
            previous = serializer("previous_epoch_detail", -1.0 if previous is None else previous)
        except KeyError:
            pass
        self._previous_epoch_detail = None if previous is None or previous < 0 else float(previous)
        if self._order is not None:  # the key Chainer's shuffling iterators require; the master's order
            try:  # loading reads into a copy: the mirror stays the master's order
                serializer("order", self._order.copy())
            except KeyError:  # a file without it (e.g. written without shuffling)
                pass
        if self.dataset_size:
            self._epoch_detail = self.epoch + self.current_position / self.dataset_size


def create_multi_node_iterator(actual_iterator, communicator, rank_master=0):
    """An iterator that yields the ``rank_master``'s batches on every rank.

    Collective: every rank calls it (non-master ranks may pass any iterator or
    None; it is not used), and every rank must call ``next`` the same number of
    times.
    """
    if not 0 <= rank_master < communicator.size:
        raise ValueError(
            f"create_multi_node_iterator: rank_master={rank_master} is not a rank of a "
            f"communicator of size {communicator.size}"
        )
    chainer.utils.experimental("mnframe.iterators.create_multi_node_iterator")
    if communicator.rank == rank_master:
        start_method.prepare(actual_iterator)
        return _MasterIterator(actual_iterator, communicator, rank_master)
    return _FollowerIterator(communicator, rank_master)
