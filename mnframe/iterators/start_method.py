"""Process start method for MultiprocessIterator workers under MPI (ChainerMN's FAQ: forkserver).

``fork`` after ``MPI_Init`` duplicates the MPI library's state (and, with
InfiniBand, pinned memory registrations) into the workers, which can crash or
hang. ``forkserver`` (or ``spawn``) starts workers from a clean process. mnframe
applies the advice when a MultiprocessIterator is wrapped and the program has
not chosen a start method itself; an explicit ``fork`` choice is respected with
a warning. Under forkserver the dataset must be picklable.
"""

import multiprocessing
import warnings

import chainer

SAFE_METHODS = ("forkserver", "spawn")


def use_safe_start_method(preferred="forkserver"):
    """Set ``preferred`` as the start method unless the program already chose one.

    Returns the start method in effect.
    """
    current = multiprocessing.get_start_method(allow_none=True)
    if current is None:
        multiprocessing.set_start_method(preferred)
        return preferred
    if current not in SAFE_METHODS:
        warnings.warn(
            f"multiprocessing start method is {current!r}: MultiprocessIterator workers forked from an "
            "MPI process can crash or hang (InfiniBand in particular). Call "
            "multiprocessing.set_start_method('forkserver') at the start of your script.",
            RuntimeWarning,
            stacklevel=3,
        )
    return current


def prepare(actual_iterator):
    """Apply the advice if ``actual_iterator`` is a MultiprocessIterator."""
    if isinstance(actual_iterator, chainer.iterators.MultiprocessIterator):
        use_safe_start_method()
