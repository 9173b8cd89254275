"""Per-rank sizes of the BLAS/OpenMP thread pools for CPU training.

NumPy's BLAS (OpenBLAS, MKL) starts one thread per core by default, in every
rank. With several ranks on a node that oversubscribes the cores (ranks x cores
threads, most of them spin-waiting), and every matrix product of every rank
slows down: the usual reason a CPU data-parallel job scales badly (torchrun sets
``OMP_NUM_THREADS=1`` for the same reason). ``configure`` gives each rank its
share of the cores it may run on instead.

``trainer.threads``: ``auto`` (the default) sizes the pools only when the job
trains on CPUs and the user set none of ``ENV_VARS``; a number sets exactly that
many threads per rank; ``keep`` changes nothing.

The ranks that share a rank's cores are those on the same kernel (``machine_key``:
its boot id), not only those of its node name: on the simulated cluster every
node is a namespace of one machine, and 8 one-rank nodes on 2 cores would
otherwise start 2 threads each (16 on 2 cores; measured in BENCHMARKS.md 6f).
"""

from __future__ import annotations

import collections
import logging
import os
from typing import Dict, Iterable, List, Optional, Union

ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")

log = logging.getLogger("mnframe.threads")


def usable_cpus() -> frozenset:
    """The CPUs this process may run on (its affinity mask)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return frozenset(range(os.cpu_count() or 1))


def fair_share(mine: frozenset, node_peers: Iterable[frozenset]) -> int:
    """Threads for one rank: its CPUs divided by the node ranks that share any of them.

    ``node_peers`` holds the CPU sets of every rank on the node, this one
    included. Ranks bound to disjoint cores (``mpiexec --bind-to core``) keep
    all of theirs; ranks that all may run anywhere split the node evenly.
    """
    sharing = sum(1 for cpus in node_peers if cpus & mine) or 1
    return max(1, len(mine) // sharing)


def user_chose(env: Dict[str, str]) -> Optional[str]:
    """The first thread variable the user set, if any."""
    return next((v for v in ENV_VARS if env.get(v)), None)


def plan(
    setting: Union[str, int], on_cpu: bool, mine: frozenset, node_peers: List[frozenset], env: Dict[str, str]
) -> Optional[int]:
    """Threads per rank for ``trainer.threads``, or None to leave the pools alone."""
    if setting == "keep":
        return None
    if isinstance(setting, int):
        return setting
    if not on_cpu or user_chose(env):
        return None
    return fair_share(mine, node_peers)


def machine_key(node_index: int) -> str:
    """What tells ranks on one kernel apart from others: the boot id (the same in every network
    and UTS namespace of a machine, different on every other machine), else the node's index."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return "boot:" + f.read().strip()
    except OSError:
        return f"node:{node_index}"


def has_spare_core(cpus: int, ranks: int) -> bool:
    """Whether ``ranks`` processes on ``cpus`` CPUs each have a CPU beyond their own, for a
    second busy thread (overlap's): MPI's waits spin, so a thread without one takes a core
    from backward (BENCHMARKS.md 13a)."""
    return cpus >= 2 * ranks


def spare_core_everywhere(comm):
    """(every rank has a spare core, a few words on the tightest machine) over ``comm``
    (collective: one allgather). Ranks count per kernel (``machine_key``), as in ``configure``;
    the verdict is the tightest rank's, the one with the fewest CPUs per rank on its machine."""
    everyone = comm.allgather_obj((machine_key(comm.inter_rank), len(usable_cpus())))
    ranks = collections.Counter(machine for machine, _ in everyone)
    cpus, n = min(((cpus, ranks[machine]) for machine, cpus in everyone), key=lambda c: c[0] / c[1])
    return has_spare_core(cpus, n), f"{n} rank(s) on {cpus} CPUs of one machine"


def apply(threads: int) -> bool:
    """Limit every BLAS/OpenMP pool of this process to ``threads`` (threadpoolctl)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency
        log.warning("threadpoolctl is not installed: BLAS thread pools left as they are")
        return False
    threadpool_limits(limits=threads)
    return True


def configure(setting: Union[str, int], comm, on_cpu: bool, env: Optional[Dict[str, str]] = None) -> Optional[int]:
    """Size this rank's thread pools (collective over ``comm``); returns the count set, or None."""
    env = os.environ if env is None else env
    mine = usable_cpus()
    # every rank learns the CPU sets of the ranks on its machine (one kernel: its node, or every
    # simulated node of the machine), fair_share counts those whose CPUs overlap its own
    key = machine_key(comm.inter_rank)
    everyone = comm.allgather_obj((key, mine))
    node_peers = [cpus for machine, cpus in everyone if machine == key]
    threads = plan(setting, on_cpu, mine, node_peers, env)
    if threads is None:
        reason = (
            f"{user_chose(env)} is set"
            if user_chose(env)
            else "trainer.threads=keep"
            if setting == "keep"
            else "training on GPUs"
        )
        log.info("BLAS/OpenMP thread pools left as they are (%s)", reason)
        return None
    if apply(threads):
        log.info(
            "BLAS/OpenMP threads per rank: %d (%d usable CPUs, %d rank(s) on this machine)",
            threads,
            len(mine),
            len(node_peers),
        )
    return threads
