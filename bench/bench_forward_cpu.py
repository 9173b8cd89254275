#!/usr/bin/env python
"""The machine's CPU per byte moved between simulated nodes (``traffic_model.CALIBRATION``'s
``moved_ns_per_byte``, issue 39 item 4).

Run (as root, in a source checkout, under the quiet lock):
    flock -x /tmp/mnframe-quiet.lock .venv/bin/python bench/bench_forward_cpu.py --name hc \\
        [--rates 1gbit,10gbit] [--nodes 2,8] [--mb 200]

On the simulated cluster every node is a network namespace of this machine: a byte one rank
sends to a rank on another node costs the sender's TCP stack, the veth, the node's tc tbf, the
bridge, the bridge port's tbf, the receiver's veth and TCP stack, all on this machine's cores.
For each rate and node count, every node I sends ``--mb`` megabytes to node I+1 (a ring: each
link carries one stream each way, all at once) through plain blocking sockets (a waiting socket
sleeps: no spinning), and the machine's busy CPU (``/proc/stat``: user, system, irq, softirq)
over the transfer, less the busy CPU of an idle interval measured just before, is divided by
the bytes moved. Prints core-ns per byte and each stream's rate.
"""

import argparse
import os
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SIMCLUSTER = os.path.join(REPO, "scripts", "simcluster.sh")
PORT = 17931
RECEIVER = r"""
import socket, sys
n = int(sys.argv[1]); s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[2]))); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); buf = bytearray(1 << 20); view = memoryview(buf); got = 0
while got < n:
    k = c.recv_into(view)
    if not k: break
    got += k
print(got, flush=True)
"""
SENDER = r"""
import socket, sys, time
n, host = int(sys.argv[1]), sys.argv[2]; c = socket.create_connection((host, int(sys.argv[3])))
buf = bytes(1 << 20); sent = 0; t = time.perf_counter()
while sent < n:
    k = min(len(buf), n - sent); c.sendall(buf[:k]); sent += k
c.shutdown(socket.SHUT_WR); c.recv(1); print(sent, time.perf_counter() - t, flush=True)
"""


def busy_and_total():
    with open("/proc/stat") as f:
        user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
    busy = user + nice + system + irq + softirq
    return busy, busy + idle + iowait + steal


def sh(*args, **kw):
    return subprocess.run(["bash", SIMCLUSTER, *args], capture_output=True, text=True, check=False, **kw)


def in_node(name, i, code, *argv):
    cmd = ["bash", SIMCLUSTER, "exec", "--name", name, f"node{i}", sys.executable, "-c", code, *map(str, argv)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ring(name, nodes, nbytes, subnet):
    """Every node sends ``nbytes`` to the next; (core-seconds busy, seconds, per-stream seconds)."""
    receivers = [in_node(name, i, RECEIVER, nbytes, PORT) for i in range(1, nodes + 1)]
    for r in receivers:
        if r.stdout.readline().strip() != "ready":
            raise SystemExit(f"receiver failed: {r.stderr.read()}")
    tick = os.sysconf("SC_CLK_TCK")
    b0, _ = busy_and_total()
    t0 = time.perf_counter()
    senders = [in_node(name, i, SENDER, nbytes, f"{subnet}.{i % nodes + 1}", PORT) for i in range(1, nodes + 1)]
    outs = [s.communicate(timeout=300) for s in senders]
    for r in receivers:
        r.communicate(timeout=60)
    seconds = time.perf_counter() - t0
    b1, _ = busy_and_total()
    streams = []
    for out, err in outs:
        if not out.strip():
            raise SystemExit(f"sender failed: {err}")
        streams.append(float(out.split()[1]))
    return (b1 - b0) / tick, seconds, streams


def idle_busy(seconds=2.0):
    """Core-seconds per second the machine is busy without us (other users' work)."""
    tick = os.sysconf("SC_CLK_TCK")
    b0, _ = busy_and_total()
    time.sleep(seconds)
    b1, _ = busy_and_total()
    return (b1 - b0) / tick / seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="fw")
    parser.add_argument("--rates", default="1gbit,10gbit")
    parser.add_argument("--nodes", default="2,8")
    parser.add_argument("--mb", type=float, default=200.0, help="megabytes each node sends")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.nodes.split(",")]
    results = []
    print(
        f"{'rate':7s} {'nodes':>5s} {'MB moved':>9s} {'s':>6s} {'stream Gbit/s':>14s} {'busy cores':>10s} "
        f"{'idle busy':>9s} {'ns/byte':>8s}"
    )
    for rate in args.rates.split(","):
        up = sh("up", "--name", args.name, "--nodes", str(max(counts)), "--rate", rate)
        if up.returncode != 0:
            raise SystemExit(f"simcluster up failed: {up.stdout}{up.stderr}")
        subnet = next(
            ln.split("=", 1)[1]
            for ln in sh("env", "--name", args.name).stdout.splitlines()
            if ln.startswith("export SIMCLUSTER_SUBNET=")
        )
        try:
            for nodes in counts:
                for _ in range(args.repeat):
                    nbytes = int(args.mb * 1e6)
                    base = idle_busy()
                    busy, seconds, streams = ring(args.name, nodes, nbytes, subnet)
                    moved = nbytes * nodes
                    ns = max(0.0, busy - base * seconds) / moved * 1e9
                    results.append(ns)
                    gbit = sorted(nbytes * 8 / s / 1e9 for s in streams)
                    print(
                        f"{rate:7s} {nodes:5d} {moved / 1e6:9.0f} {seconds:6.2f} "
                        f"{gbit[0]:6.2f}-{gbit[-1]:<6.2f}  {busy / seconds:10.2f} {base:9.2f} {ns:8.2f}",
                        flush=True,
                    )
        finally:
            sh("down", "--name", args.name)
    results.sort()
    print(
        f"median: {results[len(results) // 2]:.2f} ns per byte moved ({len(results)} transfers, range "
        f"{results[0]:.2f}-{results[-1]:.2f}); load average at the end {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
