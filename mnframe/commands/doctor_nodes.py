"""``doctor`` steps about nodes: the transport MPI uses between them, and measured bandwidth.

Multi-node problems users meet are slow or wrong transports (traffic over a 1 Gbit/s
management network, shared memory where there is none); these steps say what MPI uses and
measure it: a ping-pong between two ranks on different nodes and between two ranks of one node.
Each step returns rows ``(status, step, detail)``, which ``mnframe.commands.doctor`` turns into its
``Result``s (so this module does not import that one).
"""

from __future__ import annotations

import os
import socket
import time
from typing import List, Tuple

Row = Tuple[str, str, str]  # (PASS | FAIL | INFO | SKIP, step, detail)


def _netmod(mpi) -> str:
    """MPICH's ch4 netmod (the env setting, else the first built in), or the library's name."""
    version = mpi.Get_library_version()
    if "MPICH" not in version:
        return version.splitlines()[0].strip()
    for line in version.splitlines():
        if line.startswith("MPICH Device:"):
            built = line.split(":", 1)[1].strip()  # e.g. "ch4:ucx ofi"
            chosen = os.environ.get("MPIR_CVAR_CH4_NETMOD") or built.split(":", 1)[-1].split()[0]
            extra = {"ucx": "UCX_TLS", "ofi": "FI_PROVIDER"}.get(chosen)
            setting = f", {extra}={os.environ[extra]}" if extra and extra in os.environ else ""
            return f"MPICH {built.split(':')[0]} netmod {chosen}{setting} (built: {built})"
    return "MPICH"


def _interfaces() -> str:
    try:
        names = sorted(n for n in os.listdir("/sys/class/net") if n != "lo")
    except OSError:
        return "?"
    return ",".join(names) or "none"


def check_transport(mpi) -> List[Row]:
    comm = mpi.COMM_WORLD
    rows = comm.allgather((socket.gethostname(), _interfaces()))
    nodes = {}
    for host, ifaces in rows:
        nodes.setdefault(host, ifaces)
    if len(nodes) == 1:
        between = "one node: no traffic between nodes"
    else:
        between = f"between nodes: {_netmod(mpi)}; network interfaces " + "; ".join(
            f"{h}: {i}" for h, i in nodes.items()
        )
    within = "MPICH's shared memory" if "MPICH" in mpi.Get_library_version() else "the MPI's own choice"
    return [("INFO", "transport", f"{between}; within a node: {within}")]


def _pingpong(comm, a, b, nbytes, repeat):
    """One-way bandwidth (bytes/s) of ``nbytes`` messages between ranks a and b; None elsewhere."""
    import numpy as np

    from mnframe.runtime import oplog

    buf = np.ones(nbytes, dtype=np.uint8)
    rank = comm.Get_rank()
    comm.Barrier()
    if rank not in (a, b):
        return None
    peer = b if rank == a else a
    with oplog.op("send/recv", array=buf, peer=peer):
        for i in range(repeat + 1):  # the first round trip warms up
            if i == 1:
                start = time.perf_counter()
            if rank == a:
                comm.Send(buf, peer, tag=7)
                comm.Recv(buf, peer, tag=7)
            else:
                comm.Recv(buf, peer, tag=7)
                comm.Send(buf, peer, tag=7)
    return 2 * repeat * nbytes / (time.perf_counter() - start)


def check_node_bandwidth(mpi, nbytes: int = 16 << 20, repeat: int = 3) -> List[Row]:
    comm = mpi.COMM_WORLD
    hosts = comm.allgather(socket.gethostname())
    if len(hosts) == 1:
        return [("SKIP", "bandwidth between/within nodes", "one rank")]
    pairs = []
    other = next((r for r, h in enumerate(hosts) if h != hosts[0]), None)
    if other is not None:
        pairs.append(("between nodes", 0, other))
    for host in dict.fromkeys(hosts):
        ranks = [r for r, h in enumerate(hosts) if h == host]
        if len(ranks) > 1:
            pairs.append(("within a node", ranks[0], ranks[1]))
            break
    results = []
    for what, a, b in pairs:
        rate = comm.bcast(_pingpong(comm, a, b, nbytes, repeat), root=a)
        results.append(
            (
                "INFO",
                f"bandwidth {what}",
                f"rank {a} ({hosts[a]}) <-> rank {b} ({hosts[b]}): {rate / 1e9:.2f} GB/s "
                f"({rate * 8 / 1e9:.1f} Gbit/s; {nbytes >> 20} MiB messages, one way)",
            )
        )
    return results
