"""Multi-node evaluators: create_multi_node_evaluator and GenericMultiNodeEvaluator.

``create_multi_node_evaluator`` averages the results of all ranks **weighted by
the number of examples each rank evaluated**. ChainerMN averages the per-rank
means with equal weights, which is wrong as soon as shards differ in length
(``scatter_dataset(..., force_equal_length=False)`` on a test set, the natural
choice for an exact evaluation): a rank with 3 examples would count as much as
one with 300. Weighting by counts gives the mean over all evaluated examples.
(Within a rank, Chainer's Evaluator averages batch means; with full batches
that is the per-example mean.)

No method is patched onto the user's object: the result is an instance of a
subclass of the evaluator's own class (so ``isinstance`` holds for Evaluator
and for custom subclasses, and a custom ``evaluate``/``__call__`` still runs),
built on a shallow copy of its state; the original evaluator is left as it was.
"""

import copy

import numpy as np
from chainer import backend, function
from chainer.dataset import convert
from chainer.training import extension
from chainer.utils import argument
from mpi4py import MPI

from mnframe.runtime import oplog


class _CountingIterator:
    """Forwards to an iterator and counts the examples of the batches it yields."""

    def __init__(self, iterator, counter):
        self._iterator = iterator
        self._counter = counter

    def __iter__(self):
        return self

    def __next__(self):
        batch = next(self._iterator)
        self._counter[0] += len(batch)
        return batch

    next = __next__

    def __copy__(self):  # Evaluator copies iterators without reset(): copy the real one
        return _CountingIterator(copy.copy(self._iterator), self._counter)

    def __getattr__(self, name):
        return getattr(self.__dict__["_iterator"], name)


def _to_host(value):
    """Reported values as host numbers (device arrays cannot be pickled across ranks)."""
    if isinstance(value, (int, float, np.number)):
        return value
    return np.asarray(backend.CpuDevice().send(value))


def weighted_mean(per_rank):
    """Merge ``[(n_examples, {key: mean})]`` of all ranks into the example-weighted mean.

    A key counts only the ranks that reported it; ranks with no examples add nothing.
    If no rank counted any example (a custom ``evaluate`` that reads its data
    without the evaluator's iterators), every reporting rank weighs the same,
    as in ChainerMN.
    """
    if sum(n for n, _ in per_rank) == 0:
        per_rank = [(1, result) for _, result in per_rank]
    totals, counts = {}, {}
    for n, result in per_rank:
        if n == 0:
            continue
        for key, value in result.items():
            totals[key] = totals.get(key, 0.0) + n * np.asarray(value, dtype=np.float64)
            counts[key] = counts.get(key, 0) + n
    return {key: totals[key] / counts[key] for key in sorted(totals)}


class _MultiNodeEvaluatorMixin:
    """Runs the class's own ``evaluate`` on this rank's data, then merges all ranks."""

    _mn_communicator = None

    def evaluate(self):
        counter = [0]
        original = self._iterators
        self._iterators = {k: _CountingIterator(v, counter) for k, v in original.items()}
        mpi = self._mn_communicator.mpi_comm
        try:
            local = {key: _to_host(value) for key, value in super().evaluate().items()}
            error = None
        except Exception as e:  # the other ranks are about to wait for this rank: share it
            local, error = {}, e
        finally:
            self._iterators = original
        message = None if error is None else f"rank {mpi.rank}: {type(error).__name__}: {error}"
        with oplog.op("multi_node_evaluator.allgather"):
            per_rank = mpi.allgather((counter[0], local, message))
        if error is not None:
            raise error
        failures = [m for _, _, m in per_rank if m is not None]
        if failures:
            raise RuntimeError("multi-node evaluator: evaluation failed on another rank: " + "; ".join(failures))
        return weighted_mean([(n, result) for n, result, _ in per_rank])


_SUBCLASSES = {}


def _multi_node_class(cls):
    """The (cached) subclass of ``cls`` whose ``evaluate`` merges over ranks."""
    sub = _SUBCLASSES.get(cls)
    if sub is None:
        sub = type(
            f"MultiNode{cls.__name__}",
            (_MultiNodeEvaluatorMixin, cls),
            {"__module__": __name__, "__doc__": cls.__doc__},
        )
        _SUBCLASSES[cls] = sub
    return sub


def create_multi_node_evaluator(actual_evaluator, communicator):
    """An evaluator that reports the example-weighted mean over all ranks.

    ``actual_evaluator`` is a ``chainer.training.extensions.Evaluator`` (or a
    subclass) on this rank's shard of the validation data; it is not modified.
    Every rank must run the returned extension at the same iterations.
    """
    cls = _multi_node_class(type(actual_evaluator))
    evaluator = cls.__new__(cls)
    evaluator.__dict__.update(actual_evaluator.__dict__)
    evaluator._iterators = dict(actual_evaluator._iterators)
    evaluator._targets = dict(actual_evaluator._targets)
    evaluator._mn_communicator = communicator
    return evaluator


class GenericMultiNodeEvaluator(extension.Extension):
    """Evaluation whose results cannot be averaged: the root gathers every local result.

    ChainerMN's contract: each rank calls ``calc_local`` once per batch of its
    own iterator (the converted arrays as positional arguments, or keyword
    arguments for a dict) and gets any value but None. The root calls
    ``aggregate`` once with one flat list of every rank's values in batch order:
    the first batch of rank 0, rank 1, ..., then every rank's second batch, and
    so on, leaving out ranks whose data ran out (and None values). Override
    both. Only the root's ``__call__`` returns the aggregate; the others return
    None. Reporting is up to ``aggregate`` (set it up in ``initialize``).
    Results travel in rounds of ``gather_interval`` batches per rank (one
    gather each), so the root's memory is bounded by what it aggregates.

    Args:
        comm: mnframe communicator (None: evaluate and aggregate in this process).
        iterator: a non-repeating iterator over this rank's data.
        target: the model (``calc_local`` calls it by default).
        device: device the converter sends arrays to.
        converter: batch converter (``concat_examples``).
        root: the rank that aggregates.
        progress_hook: called at the root with every batch the root evaluated.
    """

    trigger = 1, "epoch"
    default_name = "validation"
    priority = extension.PRIORITY_WRITER
    name = None
    gather_interval = 8

    def __init__(self, comm, iterator, target, device=None, converter=convert.concat_examples, root=0, **kwargs):
        (progress_hook,) = argument.parse_kwargs(kwargs, ("progress_hook", None))
        if comm is not None and not 0 <= root < comm.size:
            raise ValueError(
                f"GenericMultiNodeEvaluator: root={root} is not a rank of a communicator of size {comm.size}"
            )
        self.comm = comm
        self.iterator = iterator
        self._targets = {"main": target}
        self.converter = converter
        self.device = backend.get_device(device) if device is not None else None
        self.root = root
        self._progress_hook = progress_hook

    def calc_local(self, *args, **kwargs):
        """This rank's value for one converted batch (default: ``target(*args, **kwargs)``); not None."""
        return self._targets["main"](*args, **kwargs)

    def aggregate(self, results):
        """Combine the flat list of all ranks' ``calc_local`` values (root only, once); default: the list."""
        return results

    def __call__(self, trainer=None):  # noqa: ARG002 - Chainer's Evaluator signature (trainer= by keyword)
        if hasattr(self.iterator, "reset"):
            self.iterator.reset()
            it = self.iterator
        else:
            it = copy.copy(self.iterator)
        if self.comm is None:  # a single process: aggregate the local results
            return self.aggregate([r for r in self._local_results(it) if r is not None])
        gathered = list(self._gather_all(it))
        return self.aggregate(gathered) if self.comm.rank == self.root else None

    def _local_results(self, it):
        for batch in it:
            in_arrays = convert._call_converter(self.converter, batch, self.device)
            with function.no_backprop_mode():
                if isinstance(in_arrays, tuple):
                    result = self.calc_local(*in_arrays)
                elif isinstance(in_arrays, dict):
                    result = self.calc_local(**in_arrays)
                else:
                    result = self.calc_local(in_arrays)
            if self._progress_hook and (self.comm is None or self.comm.rank == self.root):
                self._progress_hook(batch)
            yield result

    def _gather_all(self, it):
        """Rounds: every rank sends up to ``gather_interval`` results; stop when all are done."""
        local = self._local_results(it)
        mpi = self.comm.mpi_comm
        while True:
            chunk = [r for _, r in zip(range(self.gather_interval), local)]
            with oplog.op("generic_evaluator.gather", peer=self.root):
                parts = mpi.gather(chunk, root=self.root)
            with oplog.op("generic_evaluator.done"):
                done = mpi.allreduce(len(chunk) < self.gather_interval, op=MPI.LAND)
            if parts is not None:  # batch by batch, each batch in rank order (ChainerMN's order)
                for step in range(max(len(part) for part in parts)):
                    for part in parts:
                        if step < len(part) and part[step] is not None:
                            yield part[step]
            if done:
                return
