"""Learning-rate schedules (``optimizer.lr_schedule``): one typed model per kind,
each building its own trainer extension and trigger.

Adding a schedule is one class here with ``kind: Literal["name"]`` and a
``build`` method, plus its name in ``LrSchedule``. Chainer is imported lazily.
"""

from __future__ import annotations

from typing import Annotated, List, Literal, Optional, Tuple, Union

from pydantic import BaseModel, ConfigDict, Field

PositiveInt = Annotated[int, Field(gt=0)]
Unit = Literal["epoch", "iteration"]


class _Schedule(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def build(self, optimizer):  # pragma: no cover - every kind overrides it
        """``(extension, trigger)`` changing ``optimizer``'s ``attr``."""
        raise NotImplementedError


class ExponentialShift(_Schedule):
    """chainer.training.extensions.ExponentialShift: attr *= rate every interval."""

    kind: Literal["exponential_shift"] = "exponential_shift"
    attr: str = "lr"
    rate: float = Field(0.5, gt=0)
    init: Optional[float] = None
    target: Optional[float] = None
    interval: PositiveInt = 1
    unit: Unit = "epoch"

    def build(self, optimizer):
        from chainer.training import extensions

        return extensions.ExponentialShift(
            self.attr, self.rate, init=self.init, target=self.target, optimizer=optimizer
        ), (self.interval, self.unit)


class LinearShift(_Schedule):
    """chainer.training.extensions.LinearShift: attr moves linearly between two values."""

    kind: Literal["linear_shift"] = "linear_shift"
    attr: str = "lr"
    value_range: Tuple[float, float]
    time_range: Tuple[int, int]
    interval: PositiveInt = 1
    unit: Unit = "iteration"

    def build(self, optimizer):
        from chainer.training import extensions

        return extensions.LinearShift(
            self.attr, tuple(self.value_range), tuple(self.time_range), optimizer=optimizer
        ), (self.interval, self.unit)


class StepShift(_Schedule):
    """Multiply attr by ``rate`` at each of ``steps`` (in ``unit``s); a MultistepShift."""

    kind: Literal["step"] = "step"
    attr: str = "lr"
    rate: float = Field(0.1, gt=0)
    steps: List[PositiveInt]
    unit: Unit = "epoch"

    def build(self, optimizer):
        from chainer.training import extensions, triggers

        ext = extensions.ExponentialShift(self.attr, self.rate, optimizer=optimizer)
        return ext, triggers.ManualScheduleTrigger(list(self.steps), self.unit)


LrSchedule = Annotated[Union[ExponentialShift, LinearShift, StepShift], Field(discriminator="kind")]
