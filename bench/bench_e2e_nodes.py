#!/usr/bin/env python
"""End-to-end training across simulated nodes: mnframe (features on and off) vs the chainermn peer.

Run (as root, in a source checkout):
    .venv/bin/python bench/bench_e2e_nodes.py [--rates 1gbit,10gbit] [--placements 1x2,2x1,2x2]
        [--workloads mnist imagenet] [--variants base overlap float16 overlap+float16] [--repeat 1] [--small]

The workloads and both sides' commands are bench_e2e's (the mnist and the
synthetic imagenet recipe against bench/peer/train_*.py on the bundled
chainermn, ``naive`` communicator). For each rate it brings up one simulated
2-node cluster (``scripts/simcluster.sh``, docs/multi_node.md; links capped with
tc tbf; ``SIMCLUSTER_SCRIPT`` overrides the path) and runs, per placement
NODESxRANKS (``1x2``: one node, two ranks), the peer and every mnframe variant
one after the other, ``--repeat`` times:

* ``base``: mnframe's default CPU communicator (two_dimensional), float32;
* ``overlap``: ``optimizer.overlap=true`` (averaging during backward);
* ``float16``: ``communicator.allreduce_grad_dtype=float16``;
* ``overlap+float16``: both;
* ``overlap+auto``: overlap, and float16 on the wire where its first calls measure it faster;
* ``overlap+ddp25``: overlap with PyTorch DDP's fixed 25 MiB buckets instead of buckets sized
  to the model;
* ``powersgd``, ``overlap+powersgd``: ``communicator.compression=powersgd`` (rank 4, compressed
  after 10 full averages: docs/powersgd.md), without and with overlap.

It prints examples/s (global, after the warm-up; medians), each variant over the
peer, the share of a step in gradient averaging, and the scaling efficiency from
one node to two, ex/s(2xK) / (2 ex/s(1xK)) where both placements ran.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, REPO)

from bench.bench_e2e import COMMANDS, FULL, SMALL  # noqa: E402
from bench.peer.probe import parse_result  # noqa: E402

SIMCLUSTER = os.environ.get("SIMCLUSTER_SCRIPT", os.path.join(REPO, "scripts", "simcluster.sh"))
VARIANTS = {
    "base": [],
    "overlap": ["optimizer.overlap=true"],
    "float16": ["communicator.allreduce_grad_dtype=float16"],
    "overlap+float16": ["optimizer.overlap=true", "communicator.allreduce_grad_dtype=float16"],
    "overlap+auto": ["optimizer.overlap=true", "communicator.allreduce_grad_dtype=auto"],
    "overlap+ddp25": ["optimizer.overlap=true", "optimizer.bucket_cap_mb=25"],
    "powersgd": ["communicator.compression=powersgd"],  # rank 4, compressed after 10 averages
    "overlap+powersgd": ["optimizer.overlap=true", "communicator.compression=powersgd"],
}


def _sh(args, timeout=180, env=None):
    return subprocess.run(
        ["bash", SIMCLUSTER, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def run_side(name, argv, nodes, ppn, timeout, netmod):
    """Run one side across the cluster; (result dict or None, error or None)."""
    env = dict(
        os.environ,
        BENCH_T0=repr(time.time()),
        PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
        MPIEXEC=os.path.join(REPO, ".venv", "bin", "mpiexec"),
        PYTHONUNBUFFERED="1",
    )
    cmd = ["mpiexec", "--name", name, "--ppn", str(ppn), "--nodes-used", str(nodes), "--netmod", netmod, "--"]
    cmd += [sys.executable] + [str(a) for a in argv]
    t0 = time.time()
    try:
        proc = _sh(cmd, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout}s"
    result = parse_result(proc.stdout)
    if result is None:
        tail = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()][-3:]
        return None, f"exit {proc.returncode}: " + " | ".join(tail)[-300:]
    result["wall_s"] = time.time() - t0
    return result, None


def measure(args, rate, workloads, tmp):
    rows = []
    up = _sh(["up", "--name", args.name, "--nodes", "2", "--rate", rate])
    if up.returncode != 0:
        raise RuntimeError(f"simcluster up failed: {up.stdout}{up.stderr}")
    try:
        for w in workloads:
            for placement in args.placements.split(","):
                nodes, ppn = (int(v) for v in placement.lower().split("x"))
                runs = {"peer": []} | {v: [] for v in args.variants}
                errors = {}
                for rep in range(args.repeat):
                    run_dir = os.path.join(tmp, f"{w.name}_{rate}_{placement}_{rep}")
                    mn_argv, peer_argv = COMMANDS[w.name](w, run_dir)
                    sides = [("peer", peer_argv)] + [(v, mn_argv + VARIANTS[v]) for v in args.variants]
                    for side, argv in sides if rep % 2 == 0 else sides[::-1]:
                        result, error = run_side(args.name, argv, nodes, ppn, args.timeout, args.netmod)
                        if error:
                            errors[side] = error
                        else:
                            runs[side].append(result)
                row = {"workload": w.name, "rate": rate, "placement": placement, "errors": errors}
                for side, results in runs.items():
                    rates = [r["examples_per_s"] for r in results if r.get("examples_per_s")]
                    comm = [r["comm_fraction"] for r in results if r.get("comm_fraction") is not None]
                    row[side] = {
                        "examples_per_s": statistics.median(rates) if rates else None,
                        "comm_fraction": statistics.median(comm) if comm else None,
                        "all": rates,
                    }
                rows.append(row)
                print("# " + json.dumps(row), file=sys.stderr, flush=True)
    finally:
        _sh(["down", "--name", args.name])
    return rows


def _f(v, spec):
    return "-" if v is None else format(v, spec)


def report(rows, variants):
    print(f"\n{'workload':9s} {'link':7s} {'place':5s} {'side':16s} {'ex/s':>8s} {'x peer':>7s} {'comm%':>6s}")
    for row in rows:
        peer = row["peer"]["examples_per_s"]
        for side in ["peer"] + list(variants):
            r = row[side]
            ratio = r["examples_per_s"] / peer if r["examples_per_s"] and peer else None
            comm = None if r["comm_fraction"] is None else 100 * r["comm_fraction"]
            print(
                f"{row['workload']:9s} {row['rate']:7s} {row['placement']:5s} {side:16s} "
                f"{_f(r['examples_per_s'], '8.1f')} {_f(ratio, '7.2f')} {_f(comm, '6.1f')}"
            )
        for side, err in row["errors"].items():
            print(f"    {side}: {err}")
    index = {(r["workload"], r["rate"], r["placement"]): r for r in rows}
    print("\nscaling efficiency from 1 to 2 nodes: ex/s(2xK) / (2 x ex/s(1xK))")
    for (wl, rate, placement), row in index.items():
        nodes, ppn = placement.split("x")
        one = index.get((wl, rate, f"1x{ppn}"))
        if nodes != "2" or one is None:
            continue
        parts = []
        for side in ["peer"] + list(variants):
            a, b = row[side]["examples_per_s"], one[side]["examples_per_s"]
            parts.append(f"{side} {_f(a / (2 * b) if a and b else None, '.2f')}")
        print(f"  {wl:9s} {rate:7s} 2x{ppn} vs 1x{ppn}: " + ", ".join(parts))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1gbit,10gbit")
    parser.add_argument("--placements", default="1x2,2x1,2x2")
    parser.add_argument("--workloads", nargs="+", choices=sorted(COMMANDS), default=["mnist", "imagenet"])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=None, help="override the workloads' iteration count")
    parser.add_argument("--small", action="store_true", help="tiny sizes: checks that every side runs")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per run")
    parser.add_argument("--name", default="be", help="simulated cluster name")
    parser.add_argument("--netmod", default="ofi", choices=("ofi", "ucx"))
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    table = SMALL if args.small else FULL
    workloads = [table[n] for n in args.workloads]
    if args.iterations:
        for w in workloads:
            w.iterations = args.iterations
    tmp = tempfile.mkdtemp(prefix="bench_e2e_nodes_")
    rows = []
    for rate in args.rates.split(","):
        rows += measure(args, rate, workloads, tmp)
    report(rows, args.variants)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
