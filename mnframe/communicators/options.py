"""Per-instance communicator configuration: the known names and how each value is checked."""

import numpy as np

from mnframe.communicators.powersgd import DEFAULT_RANK, DEFAULT_START_ITER

# allreduce_grad_dtype='auto': float16 on the wire where the first calls measure it faster
# (wire_choice.py). Named here, in a module that needs no MPI, so `--check` runs without one.
WIRE_AUTO = "auto"

_FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _grad_dtype(value):
    if value is None or value == WIRE_AUTO:
        return value
    try:
        dtype = np.dtype(value)
    except TypeError:
        dtype = None
    if dtype is None or dtype not in _FLOAT_DTYPES:  # (None == np.dtype('float64') is True)
        raise ValueError(
            f"allreduce_grad_dtype={value!r}: expected None (each parameter's own dtype) "
            f"or one of float16, float32, float64, or 'auto' (float16 where it is measured faster)"
        )
    return dtype


# compression='powersgd': low-rank gradients with error feedback (powersgd.py)
COMPRESSIONS = ("none", "powersgd")


def _compression(value):
    if value is None or value in COMPRESSIONS:
        return None if value in (None, "none") else value
    raise ValueError(f"compression={value!r}: expected one of {', '.join(COMPRESSIONS)} (or None)")


def _count(what, low):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{what}={value!r}: expected an integer >= {low}")
        return int(value)

    return check


# name -> (default, validator returning the normalised value)
CONFIGS = {
    "batched_copy": (False, bool),
    "allreduce_grad_dtype": (None, _grad_dtype),
    "compression": (None, _compression),
    "powersgd_rank": (DEFAULT_RANK, _count("powersgd_rank", 1)),
    "powersgd_start_iter": (DEFAULT_START_ITER, _count("powersgd_start_iter", 0)),
}


class UnknownConfigError(ValueError, KeyError):
    """A configuration name no communicator knows (a ValueError as ChainerMN's set_config raises, and a
    KeyError as its get_config raises)."""

    __str__ = Exception.__str__


def defaults():
    return {name: default for name, (default, _) in CONFIGS.items()}


def check(name, value):
    entry = CONFIGS.get(name)
    if entry is None:
        raise UnknownConfigError(f"unknown communicator config {name!r}; known: {', '.join(sorted(CONFIGS))}")
    return entry[1](value)


def attribute(name):
    """A communicator attribute for config ``name`` (``comm.batched_copy``, as in ChainerMN): reads the
    instance's configuration, and assigning it is ``set_config(name, value)`` (checked the same way)."""
    return property(
        lambda self: self._configs[name],
        lambda self, value: self.set_config(name, value),
        doc=f"The ``{name}`` configuration (``get_config``/``set_config``).",
    )
