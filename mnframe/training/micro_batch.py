"""``MicroBatchUpdater``: a StandardUpdater that sums the gradients of ``accumulate``
micro-batches before one averaged update, and can time each phase of an iteration.

One iteration (one ``optimizer.update()``, one step of ``updater.iteration``):

    clear gradients
    N times: next batch (data), forward, backward (the gradients add up)
    gradients / N
    optimizer.update(): average over the data-parallel ranks, then the real update

For a loss that is a mean over the batch, the summed gradient equals that of one
batch N times larger, so ``updater.accumulate=N`` with batch B trains like batch
N*B (tests/mpi/test_train_accumulate.py). Reported values (``main/loss``, ...)
are the means over the N micro-batches. The multi-node optimizer keeps
ChainerMN's first broadcast-only update and its averaging (``update()`` is called
without a loss function, as ``update()`` after a manual backward).

``global_batch`` (micro-batch per rank x data-parallel ranks x N) is saved with the
trainer, so ``updater.accumulate=auto`` can keep it when a run resumes on fewer
ranks (``mnframe.checkpoint.accumulate.resolve_auto``).
"""

from __future__ import annotations

import time
from typing import Optional

import chainer
from chainer.dataset import convert
from chainer.training.updaters import StandardUpdater

PHASES = ("data", "forward", "backward", "average", "update")


class PhaseTimer:
    """Seconds spent per phase, summed over iterations (``debug=profile``)."""

    def __init__(self):
        self.totals = dict.fromkeys(PHASES, 0.0)
        self.iterations = 0

    def add(self, phase: str, seconds: float) -> None:
        self.totals[phase] += seconds


class TimedAverage:
    """Wraps a communicator: ``multi_node_mean_grad`` is timed as the ``average`` phase
    (the wait for the slowest rank included); everything else is forwarded."""

    def __init__(self, comm, timer: PhaseTimer):
        self.__dict__["_comm"] = comm
        self.__dict__["_timer"] = timer

    def __getattr__(self, name):
        return getattr(self._comm, name)

    def multi_node_mean_grad(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self._comm.multi_node_mean_grad(*args, **kwargs)
        finally:
            self._timer.add("average", time.perf_counter() - start)


class MicroBatchUpdater(StandardUpdater):
    """StandardUpdater with ``accumulate`` micro-batches per update and optional phase timing."""

    def __init__(
        self,
        iterator,
        optimizer,
        accumulate: int = 1,
        global_batch: Optional[int] = None,
        timer: Optional[PhaseTimer] = None,
        **kwargs,
    ):
        super().__init__(iterator, optimizer, **kwargs)
        self.accumulate = int(accumulate)
        self.global_batch = global_batch  # micro-batch per rank x ranks x accumulate
        self.saved_global_batch = None  # what a loaded checkpoint said
        self.timer = timer
        if timer is not None and hasattr(optimizer, "communicator"):
            optimizer.communicator = TimedAverage(optimizer.communicator, timer)

    def _tick(self, phase, start):
        now = time.perf_counter()
        if self.timer is not None:
            self.timer.add(phase, now - start)
        return now

    def update_core(self):
        iterator = self._iterators["main"]
        optimizer = self._optimizers["main"]
        target = optimizer.target
        loss_func = self.loss_func or target
        n = self.accumulate
        if getattr(optimizer, "_use_cleargrads", True):
            target.cleargrads()
        else:
            target.zerograds()
        reporter = chainer.reporter.get_current_reporter()
        summary = chainer.reporter.DictSummary() if n > 1 else None
        new_epoch = False
        averaged_before = self.timer.totals["average"] if self.timer is not None else 0.0
        for _ in range(n):
            start = time.perf_counter()
            batch = iterator.next()
            new_epoch = new_epoch or iterator.is_new_epoch
            in_arrays = convert._call_converter(self.converter, batch, self.input_device)
            start = self._tick("data", start)
            observation = {}
            if summary is not None:
                with reporter.scope(observation):
                    loss = _call(loss_func, in_arrays)
            else:
                loss = _call(loss_func, in_arrays)
            start = self._tick("forward", start)
            loss.backward(loss_scale=getattr(optimizer, "_loss_scale", None))
            del loss
            self._tick("backward", start)
            if summary is not None:
                summary.add({k: v for k, v in observation.items() if _summable(v)})
        if n > 1:
            start = time.perf_counter()
            _scale_grads(target, 1.0 / n)  # the sum of N mean-losses' gradients -> their mean
            self._tick("backward", start)
        if summary is not None:
            chainer.report({k: v for k, v in summary.compute_mean().items()})
        start = time.perf_counter()
        optimizer.update()
        if self.timer is not None:
            averaged = self.timer.totals["average"] - averaged_before
            self.timer.add("update", time.perf_counter() - start - averaged)
            self.timer.iterations += 1
        if self.auto_new_epoch and new_epoch:
            optimizer.new_epoch(auto=True)

    def serialize(self, serializer):
        super().serialize(serializer)
        value = -1 if self.global_batch is None else int(self.global_batch)
        try:
            saved = int(serializer("global_batch", value))
        except KeyError:  # a checkpoint of a StandardUpdater
            saved = -1
        if isinstance(serializer, chainer.serializer.Deserializer):
            self.saved_global_batch = saved if saved > 0 else None


def _scale_grads(target, factor: float) -> None:
    """Every gradient times ``factor``, in place. (Scaling the gradients rather than the
    loss works on model-parallel ranks too, whose "loss" is a placeholder without a gradient.)"""
    for param in target.params():
        if param.grad is not None:
            param.grad *= param.grad.dtype.type(factor)


def _call(loss_func, in_arrays):
    if isinstance(in_arrays, tuple):
        return loss_func(*in_arrays)
    if isinstance(in_arrays, dict):
        return loss_func(**in_arrays)
    return loss_func(in_arrays)


def _summable(value) -> bool:
    import numpy as np

    if isinstance(value, chainer.Variable):
        value = value.array
    return np.isscalar(value) or getattr(value, "ndim", 1) == 0
