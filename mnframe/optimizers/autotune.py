"""The runner's default averaging, measured: the fastest of the settings whose results are exact.

With no performance option set (``optimizer.overlap: auto``, ``communicator: auto``), the
runner's multi-node optimizer tries, in the first steps of training, each candidate setting
(``candidates``) and keeps the fastest for the rest of the run (docs/autotune.md). The
candidates differ only in how the mean is computed, never in its value: overlap on or off
and its bucket sizes (averaging during backward is bitwise averaging after it), and the CPU
communicators whose means are bitwise those of the default (``EXACT_CPU``). So the trial
steps are ordinary training steps and the trajectory is bitwise the old default's
(tests/mpi/test_opt_autotune.py).

As ``allreduce_grad_dtype='auto'`` (``communicators/wire_choice.py``) does for the wire:
the candidates take turns step by step, ``TRIALS`` timed steps each after one untimed step
(the first step of a setting records its bucket order or allocates its buffers); the
ranks then agree on the slowest rank's median of each and keep the fastest. Since every
trial step of a slow candidate costs the run time, candidates far slower than the fastest
leave the trial early (``DROP_AFTER``). The schedule depends only on the count of steps,
and every choice on numbers every rank shares, so every rank runs the same setting in
every step. Rank 0 logs each candidate's time and the choice.
A resumed run tries again (a few steps; the choice is not saved).
"""

import dataclasses
import logging
import statistics
import time
from typing import List, Optional

from mnframe.communicators import object_ops

log = logging.getLogger("mnframe.optimizers")

TRIALS = 3  # timed steps per candidate (after one untimed step each)
# CPU communicators whose means are bitwise the default's (two_dimensional) on every topology:
# both sum a node's slice in rank order scaled by 1/size, then the nodes' sums in node order
# (tests/mpi/test_opt_autotune.py::test_exact_communicators_agree_bitwise). flat and naive use
# MPI_Allreduce, whose order of summation differs from 3 ranks on: not candidates.
EXACT_CPU = ("two_dimensional", "hierarchical")
# CPU communicators whose every element is summed in rank order, however the buffer is cut (so
# buckets cannot change a bit): overlap is tried with these only (single_node: two_dimensional's reducer)
RANK_ORDER_SUMS = EXACT_CPU + ("single_node",)
# bucket sizes tried with overlap: the model's gradient bytes over these (optimizers/overlap.py)
SIZED_BUCKETS = (4, 2)
# after this many timed steps, candidates slower than factor x the fastest leave the trial (each
# slow step costs the run time): the first at 2x (that step may still carry a first use's cost)
DROP_AFTER = {1: 2.0, 2: 1.25}
KEEP_DEFAULT_WITHIN = 0.03  # another setting must be this much faster than the old default to be kept


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One exact setting: the communicator's name, overlap, and its buckets (with overlap: a
    fixed ``bucket_cap_mb``, or the model's gradients over ``sized_buckets``)."""

    communicator: str
    overlap: bool
    sized_buckets: int = 4
    bucket_cap_mb: Optional[float] = None

    @property
    def label(self):
        if not self.overlap:
            return f"{self.communicator}, no overlap"
        if self.bucket_cap_mb is not None:
            return f"{self.communicator}, overlap, {self.bucket_cap_mb:g} MiB buckets"
        return f"{self.communicator}, overlap, buckets of 1/{self.sized_buckets} of the model"


def candidates(
    name, size, inter_size, *, overlap, bucket_cap_mb, communicator_free, spare_core=True
) -> List[Candidate]:
    """The settings to try, the old default (``name``, ``overlap``) first. ``overlap``: True or
    False when the user set it (then it is not tried otherwise), None when it is free;
    ``communicator_free``: the name came from ``communicator: auto``; ``spare_core``: every rank
    has a core for overlap's thread (``runtime/threads.py: spare_core_everywhere``). Pruned to keep
    the trial short: overlap only with a spare core (without one, MPI's spinning waits take the
    core backward needs: it hid nothing on the simulated cluster, BENCHMARKS.md 13, and each of
    its trial steps costs the run time); the other exact communicator only across nodes with
    several ranks per node (on one node, or one rank per node, it runs the same steps), and there
    with one bucket size."""
    if overlap is None and name not in RANK_ORDER_SUMS:
        overlap = False  # MPI_Allreduce's order may depend on the message size: buckets could change bits
    if overlap is None and not spare_core:
        overlap = False
    if overlap is None:
        sizes = [bucket_cap_mb] if bucket_cap_mb is not None else list(SIZED_BUCKETS)
        settings = [(False, None)] + [(True, s) for s in sizes]
    else:
        settings = [(overlap, bucket_cap_mb if bucket_cap_mb is not None else SIZED_BUCKETS[0])]
    names = [name]
    # size and inter_size are the same on every rank (a rank's intra_size is not, on uneven nodes)
    if communicator_free and name in EXACT_CPU and 1 < inter_size < size:
        names += [n for n in EXACT_CPU if n != name]
    out = []
    for i, n in enumerate(names):
        for on, size in settings[:2] if i else settings:
            if not on:
                out.append(Candidate(n, False))
            elif isinstance(size, int):
                out.append(Candidate(n, True, sized_buckets=size))
            else:
                out.append(Candidate(n, True, bucket_cap_mb=size))
    return out


def _same_strategy(base, name):
    """A communicator named ``name`` over the same ranks and options as ``base`` (collective)."""
    from mnframe.communicators.registry import COMMUNICATORS

    return base._split_as(COMMUNICATORS[name].cls, 0, base.rank)


class Tuner:
    """Runs each update of a multi-node optimizer with the setting the trial gives it (see the
    module doc). ``decision``: after the trial, {label: (slowest rank's seconds, verdict)}, and
    ``chosen``: the kept candidate."""

    def __init__(self, optimizer, cands, base_name):
        self.optimizer = optimizer
        self.candidates = list(cands)
        self.base = optimizer.communicator
        self.comms = {}  # name -> communicator (the base under its own name)
        for c in self.candidates:
            if c.communicator not in self.comms:
                self.comms[c.communicator] = (
                    self.base if c.communicator == base_name else _same_strategy(self.base, c.communicator)
                )
        self.averagers = {}  # candidate index -> OverlapAverager
        self.active = list(range(len(self.candidates)))  # still in the trial, in turn order
        self.pos = 0  # the next in ``active`` to run
        self.round = 0  # rounds done (round 0 is untimed)
        self.times = [[] for _ in self.candidates]
        self.chosen = None
        self.decision = {}

    # ---- one update
    def update(self, lossfun, args, kwds):
        opt = self.optimizer
        if self.chosen is not None:
            return opt._update(lossfun, *args, **kwds)
        if lossfun is None:  # the caller ran backward: overlap cannot apply; keep the old default
            # nothing was swapped yet: leave the optimizer as built (an updater may have wrapped its communicator)
            self._settle(0, "update() is called without a loss function (the caller runs backward)", apply=False)
            return opt._update(lossfun, *args, **kwds)
        i = self.active[self.pos]
        self._apply(i)
        before = opt.actual_optimizer.t
        start = time.perf_counter()
        opt._update(lossfun, *args, **kwds)
        seconds = time.perf_counter() - start
        if opt.actual_optimizer.t == before:  # broadcast-only (ChainerMN's first update): not a trial step
            return
        if self.round > 0:
            self.times[i].append(seconds)
        self.pos += 1
        if self.pos == len(self.active):
            self.pos = 0
            self.round += 1
            self._end_round()

    def _apply(self, i):
        c = self.candidates[i]
        opt = self.optimizer
        opt.communicator = self.comms[c.communicator]
        opt._overlap = self._averager(i) if c.overlap else None

    def _averager(self, i):
        av = self.averagers.get(i)
        if av is None:
            from mnframe.optimizers.overlap import OverlapAverager

            c = self.candidates[i]
            av = OverlapAverager(self.comms[c.communicator], self.optimizer.zero_fill, c.bucket_cap_mb, c.sized_buckets)
            av._bucket_comm(0)  # its communicator and thread now, in the untimed round (collective: every rank)
            self.averagers[i] = av
        return av

    # ---- the choice
    def _slowest(self, summary):
        """Per active candidate, the slowest rank's ``summary`` of its timed steps (collective)."""
        mine = [summary(self.times[i]) for i in self.active]
        every = object_ops.allgather_obj(self.base.mpi_comm, mine)
        return {i: max(m[k] for m in every) for k, i in enumerate(self.active)}

    def _end_round(self):
        timed = self.round - 1  # timed rounds done
        if timed < 1:
            return
        if timed >= TRIALS:
            slowest = self._slowest(statistics.median)
            for i, s in slowest.items():
                self.decision[self.candidates[i].label] = (s, f"median of {TRIALS}")
            self._decide(slowest)
            return
        factor = DROP_AFTER.get(timed)
        if factor is None:
            return
        slowest = self._slowest(min)  # the least disturbed of its steps so far
        fastest = min(slowest.values())
        for i, s in slowest.items():
            if s > factor * fastest:
                self.decision[self.candidates[i].label] = (
                    s,
                    f"dropped after {timed} timed step(s): > {factor}x the fastest",
                )
        self.active = [i for i in self.active if slowest[i] <= factor * fastest]
        if len(self.active) == 1:
            self._decide({i: slowest[i] for i in self.active})

    def _decide(self, slowest):
        best = min(slowest, key=slowest.get)
        if 0 in slowest and slowest[0] <= (1 + KEEP_DEFAULT_WITHIN) * slowest[best]:
            best = 0  # a tie within the noise: keep the old default
        for i, s in slowest.items():
            self.decision.setdefault(self.candidates[i].label, (s, "the last one left"))
        if self.base.rank == 0:
            for c in self.candidates:
                s, how = self.decision[c.label]
                log.info("autotune: %-55s %7.1f ms per step (slowest rank, %s)", c.label, s * 1e3, how)
        if best == 0:
            why = f"the old default is the fastest, or within {KEEP_DEFAULT_WITHIN:.0%} of it"
        else:
            base = self.decision.get(self.candidates[0].label, (None,))[0]
            speed = "" if base is None else f" ({base / slowest[best]:.2f}x the speed of the old default)"
            why = "the fastest" + speed
        self._settle(best, why)

    def _settle(self, best, why, apply=True):
        """Keep candidate ``best`` from now on; free the others (collective: every rank settles in
        the same update)."""
        self.chosen = self.candidates[best]
        if apply:
            self._apply(best)
        keep = self.averagers.get(best)
        for av in list(self.averagers.values()):
            if av is not keep:
                av.close()
        self.averagers = {best: keep} if keep is not None else {}
        for name, comm in list(self.comms.items()):
            if comm is not self.base and name != self.chosen.communicator:
                comm.finalize()
                del self.comms[name]
        if self.base.rank == 0:
            log.info("autotune: chose %s: %s", self.chosen.label, why)

    def close(self):
        """Free what the trial made (collective, at the optimizer's finalize)."""
        for av in self.averagers.values():
            av.close()
        self.averagers = {}
        for comm in self.comms.values():
            if comm is not self.base:
                comm.finalize()
        self.comms = {}


def attach(optimizer, cands, base_name):
    """Let ``optimizer`` (a multi-node optimizer) run the trial of ``cands`` (two or more) in its
    first steps. Collective: it may create communicators."""
    tuner = Tuner(optimizer, cands, base_name)
    optimizer._tuner = tuner
    return tuner
