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
ranks then agree on the slowest rank's median of each and keep the fastest. The schedule
depends only on the count of steps, and the choice on numbers every rank shares, so every
rank runs the same setting in every step. Rank 0 logs each candidate's time and the choice.
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
# bucket sizes tried with overlap: the model's gradient bytes over these (optimizers/overlap.py)
SIZED_BUCKETS = (4, 2)


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


def candidates(name, size, inter_size, *, overlap, bucket_cap_mb, communicator_free) -> List[Candidate]:
    """The settings to try, the old default (``name``, ``overlap``) first. ``overlap``: True or
    False when the user set it (then it is not tried otherwise), None when it is free;
    ``communicator_free``: the name came from ``communicator: auto``. Pruned to keep the trial
    short: the other exact communicator only across nodes with several ranks per node (on one
    node, or one rank per node, it runs the same steps), and there with one bucket size."""
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
    from mnframe.communicators import options
    from mnframe.communicators.registry import COMMUNICATORS

    sub = base.mpi_comm.Split(0, base.rank)
    comm = COMMUNICATORS[name].cls(mpi_comm=sub, **{k: base.get_config(k) for k in options.CONFIGS})
    comm._owns_comm = True
    comm.powersgd = base.powersgd
    return comm


class Tuner:
    """Runs each update of a multi-node optimizer with the setting the trial gives it (see the
    module doc). ``decision``: after the trial, {label: slowest rank's median seconds}, and
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
        self.steps = 0  # stepping updates of the trial so far
        self.times = [[] for _ in self.candidates]
        self.chosen = None
        self.decision = None

    # ---- one update
    def update(self, lossfun, args, kwds):
        opt = self.optimizer
        if self.chosen is not None:
            return opt._update(lossfun, *args, **kwds)
        if lossfun is None:  # the caller ran backward: overlap cannot apply; keep the old default
            self._settle(0, "update() is called without a loss function (the caller runs backward)")
            return opt._update(lossfun, *args, **kwds)
        i = self.steps % len(self.candidates)
        self._apply(i)
        before = opt.actual_optimizer.t
        start = time.perf_counter()
        opt._update(lossfun, *args, **kwds)
        seconds = time.perf_counter() - start
        if opt.actual_optimizer.t == before:  # broadcast-only (ChainerMN's first update): not a trial step
            return
        if self.steps >= len(self.candidates):  # the first round is untimed
            self.times[i].append(seconds)
        self.steps += 1
        if self.steps == len(self.candidates) * (TRIALS + 1):
            self._decide()

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
            self.averagers[i] = av
        return av

    # ---- the choice
    def _decide(self):
        mine = [statistics.median(t) for t in self.times]
        every = object_ops.allgather_obj(self.base.mpi_comm, mine)
        slowest = [max(m[i] for m in every) for i in range(len(self.candidates))]
        best = min(range(len(slowest)), key=slowest.__getitem__)
        self.decision = {c.label: s for c, s in zip(self.candidates, slowest)}
        if self.base.rank == 0:
            for c, s in zip(self.candidates, slowest):
                log.info("autotune: %-55s %7.1f ms per step (slowest rank's median of %d)", c.label, s * 1e3, TRIALS)
        why = (
            "the old default is the fastest"
            if best == 0
            else f"fastest: {slowest[0] / slowest[best]:.2f}x the speed of the old default ({self.candidates[0].label})"
        )
        self._settle(best, why)

    def _settle(self, best, why):
        """Keep candidate ``best`` from now on; free the others (collective: every rank settles in
        the same update)."""
        self.chosen = self.candidates[best]
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
