"""How long one gradient averaging takes, from the bytes each algorithm puts on a node's link.

Pure arithmetic, no MPI: ``--check --predict`` (``commands/step_time.py``) and the tests call it.
For ``grad_bytes`` of float32 gradients on ``nodes`` x ``ranks_per_node`` ranks, ``traffic``
gives, per algorithm, the bytes one node's link carries each way, the bytes one rank sends plus
receives (what its kernel's TCP work costs) and the message rounds one rank waits for:

* ``naive``: one MPI allreduce per parameter over every rank (float16 wire: the same, halved);
* ``flat``: one MPI allreduce of the packed buffer over every rank;
* ``hierarchical``: shared-memory reduce in the node, the node leaders' pipelined allreduce
  (``wire_allreduce``: 2 (n-1)/n of the buffer per leader, ``CHUNK_BYTES`` per peer message),
  shared-memory broadcast;
* ``two_dimensional``: every node rank allreduces its 1/K slice with its peers on the other nodes
  (the same 2 (n-1)/n of the buffer per node as hierarchical, spread over K ranks' messages).

An MPI allreduce of P ranks sends 2 (P-1)/P of the array per rank (reduce-scatter + allgather),
in 2 ceil(log2 P) rounds; with K ranks per node, (P-K)/(P-1) of a rank's peers are on other
nodes, and that share of the K ranks' bytes crosses the node's link.

``averaging_ms`` turns that into time: the wire (bytes / payload rate + rounds x latency) against
the CPU the call needs (TCP work per byte, the local sums and, for float16, the conversions),
stretched by ``cpu_share`` when ranks share cores. When every node runs on the same machine
(``machine_cores``: the simulated cluster), the CPU is the machine's: each byte between nodes
costs it the sender's and receiver's TCP work and the kernel's forwarding (veth, bridge, two tc
tbf), measured together as ``moved_ns_per_byte``, and every rank's local sums, all over its
cores. The constants are in ``CALIBRATION``, each with where it was measured; none is fitted to
the end-to-end rows it is checked against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from mnframe.communicators.wire_allreduce import chunk_elements

ALGORITHMS = ("naive", "flat", "hierarchical", "two_dimensional")

# name -> (value, where it was measured). The one place these numbers live.
CALIBRATION = {
    # tc tbf counts every frame's 66 bytes of Ethernet/IP/TCP headers: 1448 of 1514 bytes are payload
    "payload_share": (1448 / 1514, "BENCHMARKS.md 6c: MTU 1500, TCP timestamps"),
    # kernel TCP work of one rank, per byte it sends or receives (ns)
    "tcp_ns_per_byte": (0.7, "BENCHMARKS.md 6 'Where the time goes': 25 MB MPI message at 1 Gbit/s, 35-38 ms CPU"),
    # the machine's CPU per byte moved between two simulated nodes (namespaces on one machine): both
    # ends' TCP work and the forwarding between them (veth, tbf, bridge, tbf, veth), in core-ns
    "moved_ns_per_byte": (
        1.13,
        "bench/bench_forward_cpu.py, BENCHMARKS.md 6f: 12 transfers, 1-10 Gbit/s, 2-8 nodes: 1.05-1.39",
    ),
    # a rank's local work per byte of float32 gradients: pack, node mean, sum of the copies, unpack (ns)
    "local_ns_per_byte": (0.33, "bench/bench_nodes_cpu.py, BENCHMARKS.md 6: 34.4 ms (2x2) / 30.8 ms (3x1) for 102 MB"),
    # float16 wire: encode, decode and the float32 sums of halves beyond float32's work, per float32 byte (ns)
    "half_ns_per_byte": (0.2, "bench/bench_nodes_cpu.py with F16C, BENCHMARKS.md 6d: +15.7 ms (2x2) / +23.2 ms (3x1)"),
    # one message round between nodes when the user gives none (us): an assumption, not a measurement
    "latency_us": (50.0, "assumed: a switched Ethernet hop; give latency_us= for your network"),
}


def constant(name: str) -> float:
    return CALIBRATION[name][0]


@dataclass(frozen=True)
class Traffic:
    """One averaging call of one algorithm."""

    link_bytes: float  # bytes one node's link carries in each direction
    rank_bytes: float  # bytes one rank sends plus receives between nodes (its TCP work)
    rounds: int  # message rounds one rank waits for, one after the other
    messages: int  # messages one rank sends between nodes


def _mpi_allreduce(nbytes: float, nodes: int, ppn: int, arrays: int = 1) -> Traffic:
    """``arrays`` MPI allreduces of ``nbytes`` in all over ``nodes`` x ``ppn`` ranks."""
    p = nodes * ppn
    if nodes == 1 or p == 1:
        return Traffic(0.0, 0.0, 0, 0)
    per_rank = 2 * (p - 1) / p * nbytes
    off_node = (p - ppn) / (p - 1)
    rounds = 2 * math.ceil(math.log2(p)) * arrays
    return Traffic(ppn * per_rank * off_node, 2 * per_rank * off_node, rounds, math.ceil(rounds * off_node))


def chunks(elements: int, itemsize: int, ranks: int) -> int:
    """Pipeline chunks ``wire_allreduce.allreduce_pipelined`` cuts ``elements`` into over ``ranks`` ranks."""
    return max(1, math.ceil(elements / chunk_elements(itemsize, ranks)))


def _pipelined(wire_bytes: float, itemsize: int, nodes: int, senders: int) -> Traffic:
    """``senders`` ranks of a node each allreduce 1/senders of ``wire_bytes`` with ``nodes`` peers."""
    if nodes == 1:
        return Traffic(0.0, 0.0, 0, 0)
    share = wire_bytes / senders
    per_rank = 2 * (nodes - 1) / nodes * share
    k = chunks(int(share // itemsize), itemsize, nodes)
    return Traffic(senders * per_rank, 2 * per_rank, 2 * k, 2 * k * (nodes - 1))


def traffic(algorithm: str, grad_bytes: float, nodes: int, ppn: int, half: bool = False, arrays: int = 1) -> Traffic:
    """Bytes and messages of one averaging of ``grad_bytes`` (float32) in ``arrays`` parameters."""
    wire = grad_bytes / 2 if half else grad_bytes
    itemsize = 2 if half else 4
    if algorithm == "naive":
        return _mpi_allreduce(wire, nodes, ppn, arrays)
    if algorithm == "flat":
        return _mpi_allreduce(wire, nodes, ppn)
    if algorithm == "hierarchical":
        return _pipelined(wire, itemsize, nodes, 1)
    if algorithm == "two_dimensional":
        return _pipelined(wire, itemsize, nodes, ppn)
    raise ValueError(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")


@dataclass(frozen=True)
class Averaging:
    """Predicted time of one averaging call (ms) and its parts."""

    wire_ms: float  # the link: bytes / payload rate + rounds x latency
    cpu_ms: float  # one rank's CPU for the call, stretched by cpu_share
    total_ms: float  # max of the two (the pipeline keeps both busy at once)
    traffic: Traffic


def averaging_ms(
    algorithm: str,
    grad_bytes: float,
    nodes: int,
    ppn: int,
    rate_bps: float,
    latency_us: float,
    half: bool = False,
    cpu_share: float = 1.0,
    arrays: int = 1,
    machine_cores: Optional[int] = None,
) -> Averaging:
    """One averaging call: ``rate_bps`` the link's bits per second, ``cpu_share`` how many ranks'
    worth of work each core carries (1 when every rank has a core of its own); ``machine_cores``:
    every node on the same machine of that many cores (the simulated cluster), whose CPU then does
    all of the call's work: ``moved_ns_per_byte`` for each byte between nodes, the local sums of
    every rank, over its cores (``cpu_share`` is not used)."""
    t = traffic(algorithm, grad_bytes, nodes, ppn, half, arrays)
    wire_ms = t.link_bytes * 8 / (rate_bps * constant("payload_share")) * 1e3 + t.rounds * latency_us / 1e3
    if nodes * ppn == 1:
        return Averaging(0.0, 0.0, 0.0, t)
    local = constant("local_ns_per_byte") + (constant("half_ns_per_byte") if half else 0.0)
    if machine_cores:
        work_ns = nodes * t.link_bytes * constant("moved_ns_per_byte") + nodes * ppn * grad_bytes * local
        cpu_ms = work_ns / 1e6 / machine_cores
    else:
        cpu_ms = (t.rank_bytes * constant("tcp_ns_per_byte") + grad_bytes * local) / 1e6 * cpu_share
    return Averaging(wire_ms, cpu_ms, max(wire_ms, cpu_ms), t)
