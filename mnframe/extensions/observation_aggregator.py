"""Aggregate one observation over all ranks (e.g. the global mean loss).

Every iteration the extension records this rank's ``trainer.observation
[original_key]`` (a Variable, a NumPy/CuPy/ChainerX array or a plain number),
moved to the host so nothing keeps a device graph alive. When ``comm_trigger``
fires, the ranks exchange their histories with one allgather and every rank
applies ``aggregator`` to the same list, so all ranks get the same value (no
second broadcast needed) and store it under ``aggregated_key``.
"""

import chainer
import numpy
from chainer import backend
from chainer.training import extension
from chainer.training import util as training_util

from mnframe.communicators import host_collectives

__all__ = ["ObservationAggregator", "average_2d"]


def average_2d(histories):
    """Default aggregator: mean over all values of all ranks (None if there are none)."""
    values = [v for history in histories for v in history]
    if not values:
        return None
    return sum(values) / len(values)


def _to_host(value):
    """A picklable host value: Python float for scalars, NumPy array otherwise."""
    if isinstance(value, chainer.Variable):
        value = value.array
    if type(value).__module__.startswith("chainerx"):
        value = value.to_device("native:0")  # a ChainerX array on any device, e.g. cuda:0
    if hasattr(value, "shape") and not isinstance(value, (numpy.ndarray, numpy.generic)):
        value = backend.CpuDevice().send(value)  # CuPy or native ChainerX -> NumPy
    if isinstance(value, (numpy.ndarray, numpy.generic)):
        return float(value) if numpy.ndim(value) == 0 else numpy.array(value)
    return value


class ObservationAggregator(extension.Extension):
    """Trainer extension that aggregates an observed value over ranks.

    Args:
        comm: a mnframe communicator (or an mpi4py communicator).
        original_key (str): the observation to aggregate.
        aggregated_key (str): where to store the result (default: overwrite
            ``original_key``).
        comm_trigger: when to communicate (default every iteration).
        aggregator: ``f(list of per-rank lists of values) -> value``; default
            the mean of all values.
    """

    trigger = 1, "iteration"
    priority = extension.PRIORITY_EDITOR
    name = None

    def __init__(self, comm, original_key, aggregated_key=None, *, comm_trigger=(1, "iteration"), aggregator=None):
        self.comm = comm
        self.original_key = original_key
        self.aggregated_key = original_key if aggregated_key is None else aggregated_key
        self.comm_trigger = training_util.get_trigger(comm_trigger)
        self.aggregator = aggregator if aggregator is not None else average_2d
        self.observation_history = []

    def compute_summary(self, trainer):
        """Record this iteration's value; at ``comm_trigger``, return the aggregate (else None)."""
        if self.original_key in trainer.observation:
            self.observation_history.append(_to_host(trainer.observation[self.original_key]))
        if not self.comm_trigger(trainer):
            return None
        histories = host_collectives.allgather_obj(self.comm, self.observation_history, name="observation_aggregator")
        self.observation_history = []
        return self.aggregator(histories)

    def __call__(self, trainer):
        summary = self.compute_summary(trainer)
        if summary is not None:
            trainer.observation[self.aggregated_key] = summary
