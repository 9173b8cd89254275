"""The predicted time of one training iteration: compute per rank, plus the averaging, less overlap.

Pure arithmetic (``commands/step_time.py`` measures or takes the inputs, calls
``traffic_model.averaging_ms`` and prints the table):

* compute: one rank's forward, backward and update alone (ms), stretched by ``cpu_share`` =
  max(1, ranks sharing the cores / cores): ranks that share cores take turns on them;
* averaging: ``communicators.traffic_model.averaging_ms`` for the algorithm, wire dtype, link
  (on the simulated cluster, ``machine_cores``: the one machine's CPU for every node's bytes);
* overlap (``optimizer.overlap``): buckets are averaged while backward runs, so up to the
  backward part of compute (``BACKWARD_SHARE``) is hidden, where each rank has a core to spare for
  the overlap's thread. Without one nothing hides: MPI's waits spin (a rank waiting 10 ms used
  11-12 ms of CPU, BENCHMARKS.md 13a), so the thread's wait takes the core backward needs; on the
  simulated cluster the trial kept overlap off in 16 of 18 rounds and explicit overlap was no
  faster (BENCHMARKS.md 6f, 13).
"""

from __future__ import annotations

from dataclasses import dataclass

from mnframe.communicators.traffic_model import Averaging

# backward's share of forward + backward + update: backward costs about twice the forward
BACKWARD_SHARE = 0.6


@dataclass(frozen=True)
class Step:
    compute_ms: float  # compute per rank, after cpu_share
    averaging: Averaging
    hidden_ms: float  # the part of the averaging overlap hides
    step_ms: float

    def examples_per_s(self, global_batch: int) -> float:
        return global_batch / self.step_ms * 1e3 if self.step_ms > 0 else float("inf")


def cpu_share(ranks_on_cores: int, cores: int) -> float:
    """How many ranks' worth of work each core carries (at least 1)."""
    return max(1.0, ranks_on_cores / max(1, cores))


def predict_step(compute_ms: float, averaging: Averaging, *, overlap: bool = False, spare_core: bool = False) -> Step:
    """One iteration: ``compute_ms`` per rank (already stretched by ``cpu_share`` where ranks share
    cores) plus ``averaging`` (``traffic_model.averaging_ms``), less what overlap hides;
    ``spare_core``: each rank has a core beyond its own for the overlap's thread."""
    hidden = min(averaging.total_ms, BACKWARD_SHARE * compute_ms) if overlap and spare_core else 0.0
    return Step(compute_ms, averaging, hidden, compute_ms + averaging.total_ms - hidden)
