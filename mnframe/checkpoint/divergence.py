"""Is training diverging? A non-finite loss in an iteration's observation, or non-finite weights.

The checkpoint extension asks every iteration (``trainer.on_nonfinite: stop``):
``code_of(observation)`` is 0 when every reported loss is finite, else a code
for the value (nan, inf, -inf). The ranks reduce it with MAX inside the
preemption agreement they already run each iteration (no extra collective), so
every rank stops at the same iteration; ``message`` is the one line the user
sees. Before a checkpoint is written, ``weights_finite`` checks the parameters
(a finite loss can still be followed by an update to infinite weights).
"""

import math

from mnframe.communicators.host_collectives import allreduce_sum

VALUES = {1: "nan", 2: "inf", 3: "-inf", 4: "non-finite weights"}  # code -> what was seen


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


def message(iteration, code, rank, key, last_checkpoint):
    """The one line a diverged run ends with."""
    what = (
        f"the weights became non-finite after iteration {iteration}"
        if code == 4
        else f"{key or 'the loss'} is {VALUES.get(code, 'non-finite')} at iteration {iteration}"
        + (f" (rank {rank})" if rank is not None else "")
    )
    kept = (
        f"the newest checkpoint, {last_checkpoint}, is the last finite one"
        if last_checkpoint
        else "no checkpoint was written"
    )
    return (
        f"{what}; training stopped, no model written, {kept}. Try a lower learning rate (optimizer.lr), "
        f"gradient clipping (optimizer.gradient_clipping=1.0) or float32 on the wire "
        f"(communicator.allreduce_grad_dtype=float32); trainer.on_nonfinite=ignore trains on regardless"
    )
