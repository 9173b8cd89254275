"""The CPU work of one rank's two_dimensional call between nodes, alone: no MPI, no link.

Run: .venv/bin/python bench/bench_nodes_cpu.py [--topologies 2x2,3x1]

bench_nodes.py times the whole call across simulated nodes; on a shared machine
those times mostly measure how much CPU the ranks got. This script times, with the
same sizes (ResNet-50's 102.2 MB of float32 gradients) and in one process, each
local step a rank performs in one call, float32 and float16 on the wire, as
process time (CPU seconds, which the machine's load inflates far less than wall
time; median of ``--repeat``). What it leaves out is the wire: the kernel's TCP
work (measured separately: about 0.7 ns per byte sent or received on this
machine) and MPI's own copies. Steps, for NODESxRANKS with slice S = elements /
RANKS per rank and part P = S / NODES:

* pack: copy the (RANKS-1)/RANKS of the gradients the node peers reduce into the segment;
* node mean: sum the RANKS copies of the slice, scaled (``host_kernels.mean_into``);
* sum: add the NODES-1 received copies of the part (float32) -- float16: decode and add
  NODES copies, round the sum (``half.encode_rounding``);
* float16 only: encode the slice (what is sent), decode the gathered (NODES-1) parts;
* to peers: copy the slice's result into the RANKS-1 node peers' segments.
"""

import argparse
import statistics
import time

import numpy as np

from mnframe.communicators import half, half_native
from mnframe.communicators.host_kernels import mean_into

ELEMENTS = 102_200_000 // 4


def cpu_ms(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times) * 1e3


def steps(nodes, ranks):
    n = ELEMENTS
    s = n // ranks
    p = s // nodes
    rng = np.random.RandomState(0)
    grads = rng.standard_normal(n).astype(np.float32)
    seg = [rng.standard_normal(n).astype(np.float32) for _ in range(ranks)]
    wire = np.empty(s, np.uint16)
    recv = rng.standard_normal(p).astype(np.float32)  # a peer's copy of my part, as received
    half.encode(recv, wire[:p])
    got = [wire[:p].copy() for _ in range(nodes)]
    out = {}
    out["pack"] = lambda: np.copyto(seg[0][: n - s], grads[: n - s])
    out["node mean"] = lambda: mean_into([grads[:s]] + [x[:s] for x in seg[1:]], [seg[0][:s]], 0.25)
    out["sum (float32)"] = lambda: [np.add(seg[0][:p], recv, out=seg[0][:p]) for _ in range(nodes - 1)]

    def sum16():
        acc = seg[0][:p]
        for i, g in enumerate(got):
            half.decode(g.view(np.float16), acc, add=i > 0)
        half.encode_rounding(acc, wire[:p])

    out["sum (float16)"] = sum16
    out["encode slice (float16)"] = lambda: half.encode(seg[0][:s], wire)
    out["decode gathered (float16)"] = lambda: half.decode(wire[: s - p].view(np.float16), seg[0][: s - p])
    out["to peers"] = lambda: [np.copyto(x[:s], seg[0][:s]) for x in seg[1:]]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topologies", default="2x2,3x1")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import os

    print(f"machine load average {os.getloadavg()[0]:.1f}; CPU ms per call of one rank (process time)")
    print(f"float16 conversions: {half_native.describe()}")
    for topo in args.topologies.split(","):
        nodes, ranks = (int(v) for v in topo.split("x"))
        ms = {k: cpu_ms(fn, args.repeat) for k, fn in steps(nodes, ranks).items()}
        f32 = ms["pack"] + ms["node mean"] + ms["sum (float32)"] + ms["to peers"]
        f16 = f32 - ms["sum (float32)"] + ms["sum (float16)"] + ms["encode slice (float16)"]
        f16 += ms["decode gathered (float16)"]
        print(f"{nodes} nodes x {ranks} ranks:")
        for k, v in ms.items():
            print(f"  {k:28s} {v:7.1f} ms")
        print(f"  {'total float32':28s} {f32:7.1f} ms")
        print(f"  {'total float16 wire':28s} {f16:7.1f} ms  (+{f16 - f32:.1f} ms)")


if __name__ == "__main__":
    main()
