"""``allreduce_grad_dtype='auto'``: float16 on the wire where it is measured to pay, else each
parameter's own dtype.

float16 halves the bytes between nodes and costs CPU for the conversions (about 1 ns per
element of a rank's slice with F16C, 8 ns with the table, ``BENCHMARKS.md`` section 6): it
pays on slow links and can cost time on fast ones or busy CPUs, and which one a cluster has
is easier measured than guessed (the way Horovod's autotuning picks its fusion settings).
For each set of parameters (each
bucket, with the overlap) the first calls alternate the two wires, ``TRIALS`` timed calls
each after one untimed call (the first call of a wire allocates its buffers); then the
ranks agree on the slowest rank's median of each, and every later call uses the faster
wire. The schedule depends only on the call count, and the choice on numbers every rank
shares, so every rank sends the same dtype in every call.
"""

import logging
import statistics

from mnframe.communicators import object_ops
from mnframe.runtime import oplog

log = logging.getLogger("mnframe.communicators")

HALF = "float16"
OWN = None  # each parameter's own dtype (float32 for float32 gradients)
TRIALS = 3  # timed calls per wire (after one untimed call each)
_SCHEDULE = [HALF, OWN] * (TRIALS + 1)


class WireChoice:
    """The wire of each parameter set (by signature key): trials first, then the faster one."""

    def __init__(self):
        self._calls = {}  # key -> calls so far
        self._times = {}  # key -> {wire: [seconds of the timed calls]}
        self._chosen = {}  # key -> the wire every later call uses
        self.decisions = {}  # key -> (seconds with float16, seconds with its own dtype), for logs and tests

    def wire_for(self, key):
        """The dtype to send this call's gradients of parameter set ``key`` in."""
        if key in self._chosen:
            return self._chosen[key]
        return _SCHEDULE[self._calls.get(key, 0)]

    def record(self, mpi_comm, key, wire, seconds):
        """Note how long this call took; after the last trial, agree on the faster wire (collective
        over the communicator's mpi4py communicator)."""
        if key in self._chosen:
            return
        n = self._calls[key] = self._calls.get(key, 0) + 1
        if n > 2:  # calls 1 and 2 are the first of each wire
            self._times.setdefault(key, {HALF: [], OWN: []})[wire].append(seconds)
        if n < len(_SCHEDULE):
            return
        mine = self._times.pop(key)
        with oplog.op("wire_choice"):
            medians = object_ops.allgather_obj(mpi_comm, (statistics.median(mine[HALF]), statistics.median(mine[OWN])))
        half, own = max(m[0] for m in medians), max(m[1] for m in medians)  # the slowest rank decides
        chosen = self._chosen[key] = HALF if half < own else OWN
        self.decisions[key] = (half, own)
        if mpi_comm.Get_rank() == 0:
            log.info(
                "allreduce_grad_dtype=auto: %s on the wire for parameter set %x (medians of the slowest "
                "rank: float16 %.1f ms, own dtype %.1f ms)",
                "float16" if chosen == HALF else "each parameter's own dtype",
                key,
                half * 1e3,
                own * 1e3,
            )
