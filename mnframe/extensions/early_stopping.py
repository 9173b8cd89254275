"""Early stopping that every rank decides identically.

Each rank's monitored value differs (its own shard), so chainer's
``EarlyStoppingTrigger`` alone could stop one rank and not the others, which
then hang in the next collective. This trigger first aggregates the monitored
value over all ranks (``ObservationAggregator``, same check interval) into
``<monitor><suffix>`` and lets a chainer ``EarlyStoppingTrigger`` watch that:
all ranks see bit-identical values, so they stop at the same iteration.
"""

from chainer.training.triggers import EarlyStoppingTrigger

from mnframe.extensions.observation_aggregator import ObservationAggregator

__all__ = ["MultiNodeEarlyStoppingTrigger"]


class MultiNodeEarlyStoppingTrigger:
    """Early-stopping trigger over the mean of ``monitor`` across ranks.

    Args:
        comm: a mnframe communicator (or an mpi4py communicator).
        check_trigger: interval of the comparisons, e.g. ``(1, 'epoch')``.
        monitor (str): the observation to watch.
        patience (int): checks without improvement before stopping
            (``patients`` is accepted as an alias, as in chainer).
        mode (str): ``'min'``, ``'max'`` or ``'auto'``.
        verbose (bool): print the decisions.
        max_trigger: stop anyway at this point, e.g. ``(100, 'epoch')``.
        suffix (str): suffix of the aggregated observation's key.
    """

    def __init__(
        self,
        comm,
        check_trigger=(1, "epoch"),
        monitor="main/loss",
        patience=3,
        mode="auto",
        verbose=False,
        max_trigger=(100, "epoch"),
        suffix="_aggregated",
        **kwargs,
    ):
        if "patients" in kwargs:
            patience = kwargs.pop("patients")
        if kwargs:
            raise TypeError(f"unexpected arguments {sorted(kwargs)} for MultiNodeEarlyStoppingTrigger")
        self.monitor_aggregated = monitor + suffix
        self.actual_trigger = EarlyStoppingTrigger(
            check_trigger=check_trigger,
            monitor=self.monitor_aggregated,
            patience=patience,
            mode=mode,
            verbose=verbose,
            max_trigger=max_trigger,
        )
        self.aggregator = ObservationAggregator(
            comm, monitor, aggregated_key=self.monitor_aggregated, comm_trigger=check_trigger
        )

    def __call__(self, trainer):
        self.aggregator(trainer)
        return self.actual_trigger(trainer)

    def get_training_length(self):
        return self.actual_trigger.get_training_length()

    def _stop_condition(self):
        return self.actual_trigger._stop_condition()

    def _init_summary(self):
        return self.actual_trigger._init_summary()
