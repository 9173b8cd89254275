"""Debug modes (``debug=fast|overfit|profile``, the ``debug`` config section).

* fast: the config option sets one iteration and one evaluation; here
  ``NoCheckpoint`` stands in for the checkpoint extension (nothing resumed or written).
* overfit: ``overfit_subset`` keeps the first batches of a rank's shard, in order.
* profile: ``report_profile`` gathers every rank's ``PhaseTimer`` at the end and
  prints the per-iteration breakdown and the slowest rank; ``profile.json`` keeps it.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Dict, List

from mnframe.training.micro_batch import PHASES, PhaseTimer

log = logging.getLogger("mnframe.debug")


class NoCheckpoint:
    """What ``pipeline.finish`` needs of a checkpoint extension, doing nothing (debug=fast)."""

    preempted = False
    interrupted = False
    diverged = None
    resumed_from = None

    def save_final(self, trainer) -> None:
        pass


def overfit_subset(dataset, n_examples: int):
    """The first ``n_examples`` of ``dataset`` (all of it when smaller)."""
    import chainer

    return chainer.datasets.SubDataset(dataset, 0, min(n_examples, len(dataset)))


def profile_rows(timer: PhaseTimer) -> Dict[str, float]:
    """Milliseconds per iteration of each phase (and their total) on this rank."""
    n = max(1, timer.iterations)
    row = {phase: 1000.0 * timer.totals[phase] / n for phase in PHASES}
    row["total"] = sum(row.values())
    row["iterations"] = timer.iterations
    return row


def format_profile(rows: List[Dict[str, float]]) -> str:
    """The table rank 0 prints: one line per rank, ms per iteration; then the slowest rank."""
    head = "rank " + " ".join(f"{p:>9}" for p in (*PHASES, "total")) + "  (ms per iteration)"
    lines = [head]
    for rank, row in enumerate(rows):
        lines.append(f"{rank:>4} " + " ".join(f"{row[p]:9.2f}" for p in (*PHASES, "total")))
    slow = slowest_rank(rows)
    compute = rows[slow]["total"] - rows[slow]["average"]
    lines.append(
        f"slowest rank: {slow} ({compute:.2f} ms of data, forward, backward and update per iteration; "
        f"the others wait for it in 'average')"
    )
    return "\n".join(lines)


def slowest_rank(rows: List[Dict[str, float]]) -> int:
    """The rank with the most time outside the averaging (the others wait for it inside)."""
    return max(range(len(rows)), key=lambda r: rows[r]["total"] - rows[r]["average"])


def report_profile(timer: PhaseTimer, world, run_dir: str) -> List[Dict[str, float]]:
    """Gather every rank's breakdown (collective); rank 0 prints it and writes profile.json."""
    from mnframe.communicators.host_collectives import allgather_obj

    rows = allgather_obj(world, profile_rows(timer), name="debug.profile")
    if world.rank == 0:
        text = format_profile(rows)
        print(f"mnframe profile ({rows[0]['iterations']} iterations, {len(rows)} rank(s)):\n{text}", flush=True)
        from mnframe.runtime.safe_paths import write_inside

        record = json.dumps({"ms_per_iteration": rows, "slowest_rank": slowest_rank(rows)}, indent=1)
        write_inside(run_dir, os.path.join(run_dir, "profile.json"), record.encode())
    return rows
