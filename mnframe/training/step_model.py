"""The predicted time of one training iteration: compute per rank, plus the averaging, less overlap.

Pure arithmetic (``commands/step_time.py`` measures or takes the inputs and prints the table):

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
from typing import Optional

from mnframe.communicators.traffic_model import Averaging, averaging_ms

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


def predict_step(
    compute_ms: float,
    algorithm: str,
    grad_bytes: float,
    nodes: int,
    ppn: int,
    rate_bps: float,
    latency_us: float,
    *,
    half: bool = False,
    overlap: bool = False,
    share: float = 1.0,
    spare_core: bool = False,
    arrays: int = 1,
    compute_share: Optional[float] = None,
    machine_cores: Optional[int] = None,
) -> Step:
    """One iteration of ``nodes`` x ``ppn`` ranks; ``share`` from ``cpu_share``; ``spare_core``:
    each rank has a core beyond its own for the overlap's thread; ``compute_share`` (default
    ``share``) stretches ``compute_ms`` instead, 1 where it was measured with the cores shared;
    ``machine_cores``: every node on one machine of that many cores (``averaging_ms``)."""
    avg = averaging_ms(algorithm, grad_bytes, nodes, ppn, rate_bps, latency_us, half, share, arrays, machine_cores)
    compute = compute_ms * (share if compute_share is None else compute_share)
    hidden = 0.0
    if overlap:
        hidden = min(avg.total_ms, BACKWARD_SHARE * compute) if spare_core else 0.0
    return Step(compute, avg, hidden, compute + avg.total_ms - hidden)
