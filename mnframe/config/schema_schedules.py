"""Learning-rate schedules (``optimizer.lr_schedule``): one typed model per kind,
each building its own trainer extension and trigger.

Adding a schedule is one class here with ``kind: Literal["name"]`` and a
``build`` method, plus its name in ``LrSchedule``. Chainer is imported lazily.
"""

from __future__ import annotations

from typing import Annotated, List, Literal, Optional, Tuple, Union

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from mnframe.config.fields import Unit


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


def _rate_attr(attr: Optional[str], optimizer) -> str:
    """The hyper-parameter a schedule changes: ``attr``, or ``lr`` where the optimizer has
    one and ``alpha`` where its ``lr`` is derived from it (Adam's family)."""
    if attr is not None:
        return attr
    hyperparam = getattr(optimizer, "hyperparam", None)
    if not hasattr(hyperparam, "lr") and hasattr(hyperparam, "alpha"):
        return "alpha"
    return "lr"


class Warmup(_Schedule):
    """Linear warm-up: ``attr = init * (t + 1) / length`` for the first ``length`` updates
    (``unit: epoch``: epochs, fractional), then ``init``; ``init`` null: the optimizer's value."""

    kind: Literal["warmup"] = "warmup"
    attr: Optional[str] = None  # null: lr, or alpha for optimizers whose lr is derived (Adam)
    length: PositiveInt
    init: Optional[float] = Field(None, gt=0)
    unit: Unit = "iteration"

    def build(self, optimizer):
        from mnframe.extensions.lr_schedules import FunctionShift, warmup_factor

        length = self.length
        factor = lambda t, _trainer: warmup_factor(t, length)  # noqa: E731
        ext = FunctionShift(_rate_attr(self.attr, optimizer), factor, self.unit, self.init, optimizer)
        return ext, (1, "iteration")


class Cosine(_Schedule):
    """Cosine decay from ``init`` to ``init * min_ratio`` at ``total`` (null: the length of
    ``trainer.stop``), after an optional linear ``warmup`` (both in ``unit``s)."""

    kind: Literal["cosine"] = "cosine"
    attr: Optional[str] = None  # null: lr, or alpha for optimizers whose lr is derived (Adam)
    init: Optional[float] = Field(None, gt=0)
    min_ratio: float = Field(0.0, ge=0, le=1)
    total: Optional[PositiveInt] = None
    warmup: int = Field(0, ge=0)
    unit: Unit = "iteration"

    @model_validator(mode="after")
    def _warmup_within_total(self):
        if self.total is not None and self.warmup >= self.total:
            raise ValueError(f"warmup ({self.warmup}) must be shorter than total ({self.total})")
        return self

    def build(self, optimizer):
        from mnframe.extensions.lr_schedules import FunctionShift, cosine_factor, training_length

        total, warmup, min_ratio, unit = self.total, self.warmup, self.min_ratio, self.unit

        def factor(t, trainer):
            length = total if total is not None else training_length(trainer, unit)
            return cosine_factor(t, length, warmup, min_ratio)

        return FunctionShift(_rate_attr(self.attr, optimizer), factor, unit, self.init, optimizer), (1, "iteration")


LrSchedule = Annotated[Union[ExponentialShift, LinearShift, StepShift, Warmup, Cosine], Field(discriminator="kind")]
