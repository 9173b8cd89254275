#!/usr/bin/env python
"""The averaging alone, and after a compute phase, across simulated nodes (issue 39 item 4's 8 x 1 row).

Run (as root, in a source checkout, on a quiet machine):
    flock -x -o /tmp/mnframe-quiet.lock .venv/bin/python bench/bench_stagger_nodes.py \\
        [--rate 1gbit] [--nodes 4,8] [--compute-ms 9.5[,19]] [--name hc]

Brings up one simulated cluster (``scripts/simcluster.sh``, as many nodes as the largest count,
links capped with tc tbf) and, at N nodes x 1 rank for each N, times ``multi_node_mean_grad`` of
the mnist recipe's MLP gradients (64-1000-1000-10, 4.3 MB float32, two_dimensional) two ways,
25 calls each after 5:

* ``barrier``: every rank enters together (an ``MPI_Barrier`` first): the averaging alone, which
  ``--predict``'s averaging term models;
* ``compute``: first ``--compute-ms`` of CPU time per rank (a 300 x 300 matrix product loop, one
  BLAS thread), as a training step's forward and backward; with more ranks than cores the ranks
  take turns on them and reach the averaging at different times.

Printed per mode: the median averaging time of rank 0 and of the slowest rank, and (compute)
the whole step's median.
"""

import argparse
import os
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SIMCLUSTER = os.path.join(REPO, "scripts", "simcluster.sh")

WORKER = r"""
import os, sys, time
import numpy as np
import chainer
import chainer.links as L
from mpi4py import MPI
import mnframe as chainermn

comm = chainermn.create_communicator("two_dimensional")
model = chainer.Sequential(L.Linear(64, 1000), L.Linear(1000, 1000), L.Linear(1000, 10))
for p in model.params():
    p.grad = np.ones_like(p.array)
a = np.random.default_rng(0).random((300, 300)).astype(np.float32)
compute_s = float(sys.argv[1]) / 1e3

def busy(seconds):
    end = time.process_time() + seconds  # CPU time: the same work however the cores are shared
    while time.process_time() < end:
        a @ a

for mode in ("barrier", "compute"):
    avg, steps = [], []
    for _ in range(30):
        for p in model.params():
            p.grad[...] = 1
        t0 = time.perf_counter()
        if mode == "barrier":
            comm.mpi_comm.Barrier()
        else:
            busy(compute_s)
        t = time.perf_counter()
        comm.multi_node_mean_grad(model)
        avg.append(time.perf_counter() - t)
        steps.append(time.perf_counter() - t0)
    mine = float(np.median(avg[5:]))
    slowest = comm.mpi_comm.allreduce(mine, op=MPI.MAX)
    if comm.rank == 0:
        step = f", step {1e3 * np.median(steps[5:]):.1f} ms" if mode == "compute" else ""
        print(f"RESULT {comm.size}x1 {mode}: averaging {1e3 * mine:.1f} ms (slowest rank {1e3 * slowest:.1f}){step}")
"""


def _sh(args, env=None, timeout=300):
    return subprocess.run(["bash", SIMCLUSTER, *args], capture_output=True, text=True, env=env, timeout=timeout)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--nodes", default="4,8")
    parser.add_argument(
        "--compute-ms", default="9.5", help="CPU ms per rank before each averaging (a list: each in turn)"
    )
    parser.add_argument("--name", default="hc", help="simulated cluster name")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.nodes.split(",")]
    up = _sh(["up", "--name", args.name, "--nodes", str(max(counts)), "--rate", args.rate])
    if up.returncode != 0:
        raise SystemExit(f"simcluster up failed: {up.stdout}{up.stderr}")
    env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1", MPIEXEC=os.path.join(REPO, ".venv", "bin", "mpiexec"))
    try:
        for n in counts:
            cmd = ["mpiexec", "--name", args.name, "--ppn", "1", "--nodes-used", str(n), "--netmod", "ofi", "--"]
            for compute_ms in args.compute_ms.split(","):
                proc = _sh(cmd + [sys.executable, "-c", WORKER, compute_ms], env=env)
                lines = [ln[len("RESULT ") :] for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
                lines = [f"{ln} [compute {compute_ms} ms]" for ln in lines]
                failed = f"{n}x1: exit {proc.returncode}: {(proc.stdout + proc.stderr)[-300:]}"
                print("\n".join(lines) or failed, flush=True)
    finally:
        _sh(["down", "--name", args.name])


if __name__ == "__main__":
    main()
