"""Is training diverging? A non-finite loss in an iteration's observation, a finite loss that
ran away (``Watch``), or non-finite weights.

The checkpoint extension asks every iteration (``trainer.on_nonfinite: stop``):
``code_of(observation)`` is 0 when every reported loss is finite, else a code
for the value (nan, inf, -inf). ``Watch`` adds the finite rule (code 5): after
``trainer.divergence_warmup`` iterations, a loss above ``trainer.divergence_factor``
times its lowest value so far AND above its first value (this run) has diverged
(Adam with ``alpha=1e6`` reaches 5.6e10 without ever being NaN); normal training,
including noisy batches near a tiny best loss, stays below its first value. The ranks reduce it with MAX inside the
preemption agreement they already run each iteration (no extra collective), so
every rank stops at the same iteration; ``message`` is the one line the user
sees. Before a checkpoint is written, ``weights_finite`` checks the parameters
(a finite loss can still be followed by an update to infinite weights).
"""

import math

from mnframe.communicators.host_collectives import allreduce_sum

VALUES = {1: "nan", 2: "inf", 3: "-inf", 4: "non-finite weights", 5: "diverging"}  # code -> what was seen
RUNAWAY = 5  # a finite loss above the factor (Watch)


def _is_loss(key):
    return key.rsplit("/", 1)[-1].endswith("loss")


def _float(value):
    array = getattr(value, "array", value)  # chainer.Variable
    try:
        return float(array)
    except (TypeError, ValueError):
        return None  # not a scalar: not a loss we can judge


def code_of(observation):
    """(code, key): the first non-finite loss of ``observation`` ({name: value}), or (0, None)."""
    for key in sorted(observation):
        if not _is_loss(key):
            continue
        value = _float(observation[key])
        if value is None or math.isfinite(value):
            continue
        return (1 if math.isnan(value) else 2 if value > 0 else 3), key
    return 0, None


class Watch:
    """The finite-divergence rule over the losses of each iteration (per key, on this rank).

    ``factor``: None turns the rule off; ``warmup``: iterations a key is seen before it is judged."""

    def __init__(self, factor=1.0e4, warmup=10):
        self.factor, self.warmup = factor, int(warmup)
        self.seen = {}  # key -> [count, first, lowest]
        self.detail = None  # 'value 5.6e+10, lowest 0.12, first 2.3' of the last runaway

    def code(self, observation):
        """(code, key): ``code_of``'s verdict, else (RUNAWAY, key) for a loss that ran away, else (0, None)."""
        code, key = code_of(observation)
        if code or self.factor is None:
            return code, key
        for key in sorted(observation):
            value = _float(observation[key]) if _is_loss(key) else None
            if value is None:
                continue
            state = self.seen.setdefault(key, [0, value, value])
            state[0] += 1
            count, first, lowest = state
            if count > self.warmup and lowest > 0 and value > self.factor * lowest and value > first:
                self.detail = f"{key} = {value:.3g}, above {self.factor:g} x its lowest value {lowest:.3g}"
                return RUNAWAY, key
            state[2] = min(lowest, value)
        return 0, None


def weights_finite(trainer, comm):
    """True on every rank when every parameter of every optimizer's target is finite on every rank
    (collective: one one-integer allreduce)."""
    import chainer
    import numpy

    bad = 0
    for optimizer in trainer.updater.get_all_optimizers().values():
        for param in optimizer.target.params(include_uninit=False):
            xp = chainer.backend.get_array_module(param.array)
            if not bool(xp.isfinite(param.array).all()):
                bad = 1
                break
    return int(allreduce_sum(comm, numpy.array([bad], dtype=numpy.int64), name="divergence.weights")[0]) == 0


def message(iteration, code, rank, key, last_checkpoint, detail=None):
    """The one line a diverged run ends with."""
    where = f" at iteration {iteration}" + (f" (rank {rank})" if rank is not None else "")
    if code == 4:
        what = f"the weights became non-finite after iteration {iteration}"
    elif code == RUNAWAY:
        what = f"{detail or (key or 'the loss') + ' ran away'}{where} (trainer.divergence_factor)"
    else:
        what = f"{key or 'the loss'} is {VALUES.get(code, 'non-finite')}{where}"
    if not last_checkpoint:
        kept = "no checkpoint was written"
    elif code == RUNAWAY:
        kept = f"the newest checkpoint is {last_checkpoint}"
    else:
        kept = f"the newest checkpoint, {last_checkpoint}, is the last finite one"
    off = "; trainer.divergence_factor=null turns the runaway-loss rule off" if code == RUNAWAY else ""
    return (
        f"{what}; training stopped, no model written, {kept}. Try a lower learning rate (optimizer.lr), "
        f"gradient clipping (optimizer.gradient_clipping=1.0) or float32 on the wire "
        f"(communicator.allreduce_grad_dtype=float32); trainer.on_nonfinite=ignore trains on regardless{off}"
    )
