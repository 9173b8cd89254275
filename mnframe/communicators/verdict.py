"""Shared verdicts: a check that may fail on only some ranks raises on all of them.

A rank that raises alone leaves its peers blocked in the next collective. So a
local check produces an error string (or None), the strings are allgathered
(by the array collectives' header exchange, or ``utils.collectives.share_verdict``),
and every rank raises the same error naming the ranks at fault.
"""


class CommunicatorArgumentError(ValueError):
    """A communicator call was given arguments that do not agree across ranks.

    Raised with the same message on every rank of the communicator.
    """


def raise_if_any(errors, what, exc_type=CommunicatorArgumentError):
    """Raise one ``exc_type`` built from every rank's error string (None = fine), in rank order."""
    bad = [(r, e) for r, e in enumerate(errors) if e is not None]
    if bad:
        lines = "\n".join(f"  rank {r}: {e}" for r, e in bad)
        raise exc_type(f"{what} failed on {len(bad)} of {len(errors)} ranks:\n{lines}")
