"""Shared verdicts: a check that may fail on only some ranks raises on all of them.

A rank that raises alone leaves its peers blocked in the next collective. So a
local check produces an error string (or None), the strings are allgathered, and
every rank raises the same ``CommunicatorArgumentError`` naming the ranks at
fault. The exchange is one small pickled allgather, only on checked paths.
"""
from mnframe.runtime import oplog


class CommunicatorArgumentError(ValueError):
    """A communicator call was given arguments that do not agree across ranks.

    Raised with the same message on every rank of the communicator.
    """


def agree(mpi_comm, error, what):
    """Allgather this rank's ``error`` (str or None); raise on every rank if any is set."""
    with oplog.op(f"verdict:{what}"):
        errors = mpi_comm.allgather(error)
    raise_if_any(errors, what)


def raise_if_any(errors, what):
    """Raise one message built from a list of per-rank error strings (None = fine)."""
    bad = [(r, e) for r, e in enumerate(errors) if e is not None]
    if bad:
        lines = "\n".join(f"  rank {r}: {e}" for r, e in bad)
        raise CommunicatorArgumentError(f"{what} failed on {len(bad)} of {len(errors)} ranks:\n{lines}")
