"""Per-instance communicator configuration: the known names and how each value is checked."""

import numpy as np

_FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _grad_dtype(value):
    if value is None:
        return None
    try:
        dtype = np.dtype(value)
    except TypeError:
        dtype = None
    if dtype not in _FLOAT_DTYPES:
        raise ValueError(
            f"allreduce_grad_dtype={value!r}: expected None (each parameter's own dtype) "
            f"or one of float16, float32, float64"
        )
    return dtype


# name -> (default, validator returning the normalised value)
CONFIGS = {
    "batched_copy": (False, bool),
    "allreduce_grad_dtype": (None, _grad_dtype),
}


def defaults():
    return {name: default for name, (default, _) in CONFIGS.items()}


def check(name, value):
    entry = CONFIGS.get(name)
    if entry is None:
        raise ValueError(f"unknown communicator config {name!r}; known: {', '.join(sorted(CONFIGS))}")
    return entry[1](value)
