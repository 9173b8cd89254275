"""Shared verdicts: a check that may fail on only some ranks raises on all of them.

A rank that raises alone leaves its peers blocked in the next collective. So a
local check produces an error string (or None), the strings are allgathered
(by the array collectives' header exchange, or ``communicators.host_collectives.share_verdict``),
and every rank raises the same error, marked ``agreed`` (``runtime.errors.agreed``:
the guard then ends every rank together). The message is worded by one of the
functions below (``each_rank`` unless the caller passes another).
"""

import dataclasses
from typing import List, Tuple

from mnframe.runtime.errors import agreed


class CommunicatorArgumentError(ValueError):
    """A communicator call was given arguments that do not agree across ranks.

    Raised with the same message on every rank of the communicator.
    """


@dataclasses.dataclass(frozen=True)
class Failures:
    """What failed (``what``), on which ranks with which error (``bad``), of ``size`` ranks."""

    what: str
    bad: List[Tuple[int, str]]
    size: int


def each_rank(f: Failures) -> str:
    """``what failed on 1 of 2 ranks:`` and one line per rank at fault."""
    lines = "\n".join(f"  rank {r}: {e}" for r, e in f.bad)
    return f"{f.what} failed on {len(f.bad)} of {f.size} ranks:\n{lines}"


def first(f: Failures) -> str:
    """The first rank's error alone (the ranks checked the same thing, e.g. the same config)."""
    return f.bad[0][1]


def distinct(f: Failures) -> str:
    """Each different error once, in rank order, joined by ``; ``."""
    return "; ".join(dict.fromkeys(e for _, e in f.bad))


def raise_if_any(errors, what, exc_type=CommunicatorArgumentError, wording=each_rank):
    """Raise one ``exc_type`` (marked ``agreed``) worded from every rank's error string
    (None = fine), in rank order; ``wording(Failures) -> str``."""
    bad = [(r, e) for r, e in enumerate(errors) if e is not None]
    if bad:
        raise agreed(exc_type(wording(Failures(what, bad, len(errors)))))
