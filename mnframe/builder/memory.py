"""The memory a rank's model and optimizer hold, logged once they are built.

Parameters are counted from the arrays (or, for a parameter not initialised yet, its
shape); the optimizer's state is created at the first update, so it is estimated from
the update rule: ``init_state`` is run on a two-element probe parameter to count the
state values it keeps per parameter value (MomentumSGD: 1, Adam: 2, SGD: 0).
"""

import copy
from typing import Dict, Tuple

import numpy as np

from mnframe.runtime.sizes import human_bytes


def parameter_bytes(model) -> Tuple[int, int, int]:
    """(bytes, values, parameters not initialised yet) of ``model``'s parameters; one not
    initialised (a Linear with in_size None) has no size until the first batch."""
    nbytes = count = pending = 0
    for param in model.params():
        if param.array is not None:
            nbytes += param.array.nbytes
            count += param.array.size
        else:
            pending += 1
    return nbytes, count, pending


def state_per_value(rule) -> float:
    """How many state values ``rule`` keeps per parameter value (estimated with a probe)."""
    import chainer

    if rule is None:
        return 0.0
    probe = copy.copy(rule)
    probe._state = {}
    try:
        param = chainer.Parameter(np.zeros(2, np.float32))
        probe.init_state(param)
    except Exception:
        return 0.0
    return sum(getattr(v, "size", 0) for v in probe._state.values()) / 2.0


def describe(models: Dict[str, object]) -> str:
    """'parameters 3.0 MiB (795,010 values), optimizer state 6.1 MiB (MomentumSGDRule: 1 value per parameter value)'."""
    nbytes = count = pending = 0
    state = 0.0
    rules = set()
    for model in models.values():
        b, c, p = parameter_bytes(model)
        nbytes, count, pending = nbytes + b, count + c, pending + p
        for param in model.params():
            rule = getattr(param, "update_rule", None)
            per = state_per_value(rule)
            if param.array is not None:
                state += per * param.array.nbytes
            if rule is not None:
                rules.add(f"{type(rule).__name__}: {per:g} per parameter value")
    kinds = f" ({'; '.join(sorted(rules))})" if rules else ""
    later = f"; {pending} parameter(s) get their size at the first batch, not counted" if pending else ""
    return (
        f"memory per rank: parameters {human_bytes(nbytes)} ({count:,} values), "
        f"optimizer state {human_bytes(state)}{kinds}{later}"
    )
