"""Learning-rate schedules that are a function of training progress (``warmup``, ``cosine``).

``FunctionShift`` sets ``optimizer.<attr>`` to ``init * factor(t)`` before every
update, where ``t`` is the number of updates made (or the epochs, fractional,
with ``unit='epoch'``). The value depends only on ``t`` and ``init``, and
``init`` is saved with the trainer, so a resumed run continues the same curve.
The factors are plain functions here, shared by the config kinds in
``mnframe.config.schema_schedules``.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

from chainer.training import extension


def warmup_factor(t: float, length: float) -> float:
    """Linear warm-up: ``(t + 1) / length`` during the first ``length`` steps, then 1.

    The first update already uses ``1/length`` of the rate (not zero, which would waste it)."""
    if length <= 0 or t >= length:
        return 1.0
    return min(1.0, (t + 1) / length)


def cosine_factor(t: float, total: float, warmup: float, min_ratio: float) -> float:
    """Linear warm-up over ``warmup`` steps, then half a cosine from 1 down to ``min_ratio``
    at ``total`` (and ``min_ratio`` after it)."""
    if t < warmup:
        return warmup_factor(t, warmup)
    span = max(total - warmup, 1e-12)
    progress = min(1.0, max(0.0, (t - warmup) / span))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def training_length(trainer, unit: str) -> float:
    """The stop trigger's length in ``unit`` (epochs of the main iterator -> iterations)."""
    period, stop_unit = trainer.stop_trigger.get_training_length()
    if stop_unit == unit:
        return float(period)
    iterator = trainer.updater.get_iterator("main")
    per_epoch = len(iterator.dataset) / iterator.batch_size
    return period * per_epoch if unit == "iteration" else period / per_epoch


class FunctionShift(extension.Extension):
    """``optimizer.<attr> = init * factor(t, trainer)`` before each update.

    ``init`` defaults to the optimizer's value when training starts; it is
    serialized, so a resume does not take the (already scheduled) current value
    as its start."""

    trigger = (1, "iteration")
    priority = extension.PRIORITY_WRITER

    def __init__(self, attr: str, factor: Callable[[float, object], float], unit: str, init=None, optimizer=None):
        self._attr = attr
        self._factor = factor
        self._unit = unit
        self._init: Optional[float] = init
        self._optimizer = optimizer

    def _progress(self, trainer) -> float:
        updater = trainer.updater
        return float(updater.iteration) if self._unit == "iteration" else float(updater.epoch_detail)

    def _set(self, trainer):
        optimizer = self._optimizer or trainer.updater.get_optimizer("main")
        if self._init is None:
            self._init = float(getattr(optimizer, self._attr))
        setattr(optimizer, self._attr, self._init * self._factor(self._progress(trainer), trainer))

    def initialize(self, trainer):
        self._set(trainer)

    def __call__(self, trainer):
        self._set(trainer)  # after update t: the value update t+1 uses

    def value(self, trainer) -> float:
        """The value the next update uses (for tests and reports)."""
        return self._init * self._factor(self._progress(trainer), trainer)

    def serialize(self, serializer):
        try:
            init = serializer("init", -1.0 if self._init is None else self._init)
        except KeyError:  # a checkpoint written without this schedule: start from the optimizer's value
            return
        if init is not None and float(init) >= 0:
            self._init = float(init)
