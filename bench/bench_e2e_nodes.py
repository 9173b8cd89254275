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

* ``default``: nothing set (``communicator=auto``): ``optimizer.autotune`` tries the exact
  settings in the first steps and keeps the fastest (docs/autotune.md);
* ``base``: the old default, fixed: two_dimensional, float32, no overlap (``optimizer.autotune=false``);
* ``overlap``: ``optimizer.overlap=true`` (averaging during backward);
* ``hierarchical``, ``hierarchical+overlap``: the other exact CPU communicator, without and with
  overlap (only across nodes with several ranks per node: elsewhere it runs two_dimensional's steps);
* ``float16``: ``communicator.allreduce_grad_dtype=float16``;
* ``overlap+float16``: both;
* ``overlap+auto``: overlap, and float16 on the wire where its first calls measure it faster;
* ``overlap+ddp25``: overlap with PyTorch DDP's fixed 25 MiB buckets instead of buckets sized
  to the model;
* ``powersgd``, ``overlap+powersgd``: ``communicator.compression=powersgd`` (rank 4, compressed
  after 10 full averages: docs/powersgd.md), without and with overlap;
* ``base+threads1``: ``base`` with one BLAS thread per rank (``trainer.threads=1``);
* ``flat``, ``naive``: the communicators that average through ``MPI_Allreduce`` (not exact
  from 3 ranks on, so not among the default's candidates), no trial.

It prints examples/s (global, after the warm-up; medians), each variant over the
peer, the share of a step in gradient averaging, each side's step time over the row's
limit, max(compute, averaging at the link rate) per step (``limit_step``; compute from one
1-rank run per workload with the ``dummy`` communicator, ``--no-limits`` skips it), the
default against the peer and against the best exact option of the row (``EXACT``), and the
scaling efficiency from one node to two, ex/s(2xK) / (2 ex/s(1xK)) where both placements
ran. ``--json FILE`` keeps the rows; ``--report FILE...`` prints the report of such files.
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
    "default": ["communicator=auto"],  # nothing set: optimizer.autotune's trial (docs/autotune.md)
    "base": ["optimizer.autotune=false"],  # the old default, fixed
    "overlap": ["optimizer.overlap=true"],
    "hierarchical": ["communicator=hierarchical", "optimizer.autotune=false"],
    "hierarchical+overlap": ["communicator=hierarchical", "optimizer.overlap=true"],
    "float16": ["communicator.allreduce_grad_dtype=float16", "optimizer.autotune=false"],
    "overlap+float16": ["optimizer.overlap=true", "communicator.allreduce_grad_dtype=float16"],
    "overlap+auto": ["optimizer.overlap=true", "communicator.allreduce_grad_dtype=auto"],
    "overlap+ddp25": ["optimizer.overlap=true", "optimizer.bucket_cap_mb=25"],
    "powersgd": ["communicator.compression=powersgd"],  # rank 4, compressed after 10 averages
    "overlap+powersgd": ["optimizer.overlap=true", "communicator.compression=powersgd"],
    # diagnostics of section 13's 2 x 1 row: the old default with one BLAS thread per rank, and the
    # communicators that average through MPI_Allreduce (not exact from 3 ranks on: not in EXACT)
    "base+threads1": ["optimizer.autotune=false", "trainer.threads=1"],
    "flat": ["communicator=flat", "optimizer.autotune=false"],
    "naive": ["communicator=naive", "optimizer.autotune=false"],
}


# the exact options (results bitwise the old default's) the default is compared with
EXACT = ("base", "overlap", "hierarchical", "hierarchical+overlap")
# run only across nodes with several ranks per node: elsewhere hierarchical runs two_dimensional's steps
MULTI_RANK_NODES_ONLY = ("hierarchical", "hierarchical+overlap")
CORES = os.cpu_count() or 1  # every simulated node shares this machine's cores


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


def _with(argv, overrides):
    """``argv`` plus ``overrides``; a group chosen in both (``communicator=``) takes the override's."""
    groups = {o.split("=", 1)[0] for o in overrides if "." not in o.split("=", 1)[0]}
    return [a for a in argv if str(a).split("=", 1)[0] not in groups] + list(overrides)


def compute_step(args, w, tmp):
    """Seconds per step of one rank alone, without averaging (mnframe, ``dummy`` communicator)."""
    mn_argv, _ = COMMANDS[w.name](w, os.path.join(tmp, f"{w.name}_compute"))
    result, error = run_side(
        args.name, _with(mn_argv, ["communicator=dummy", "optimizer.autotune=false"]), 1, 1, args.timeout, args.netmod
    )
    if error:
        print(f"# compute reference of {w.name}: {error}", file=sys.stderr, flush=True)
        return None
    return result["step_s"]


def link_bits_per_s(rate):
    """``1gbit`` -> 1e9 (tc's units)."""
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}
    for unit, scale in units.items():
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * scale
    raise ValueError(f"unknown rate {rate!r}")


def limit_step(row):
    """The row's limit, seconds per step: max(compute, averaging at the link rate). Compute: one
    rank's step alone (``compute_step``), times the ranks per core when the simulated nodes'
    ranks outnumber this machine's cores (they share them). Averaging: a node sends
    2 (N-1)/N of the gradients over its link in an allreduce among N nodes (what
    two_dimensional and hierarchical send, and a ring)."""
    compute, nbytes = row.get("compute_step_s"), row.get("grad_bytes")
    if compute is None or nbytes is None:
        return None
    nodes, ppn = (int(v) for v in row["placement"].split("x"))
    compute *= max(1.0, nodes * ppn / CORES)
    link = 2 * (nodes - 1) / nodes * nbytes * 8 / link_bits_per_s(row["rate"])
    return max(compute, link)


def measure(args, rate, workloads, tmp, computes):
    rows = []
    up = _sh(["up", "--name", args.name, "--nodes", "2", "--rate", rate])
    if up.returncode != 0:
        raise RuntimeError(f"simcluster up failed: {up.stdout}{up.stderr}")
    try:
        for w in workloads:
            for placement in args.placements.split(","):
                nodes, ppn = (int(v) for v in placement.lower().split("x"))
                variants = [v for v in args.variants if v not in MULTI_RANK_NODES_ONLY or (nodes > 1 and ppn > 1)]
                if args.limits and w.name not in computes:
                    computes[w.name] = compute_step(args, w, tmp)
                runs = {"peer": []} | {v: [] for v in variants}
                errors = {}
                for rep in range(args.repeat):
                    run_dir = os.path.join(tmp, f"{w.name}_{rate}_{placement}_{rep}")
                    mn_argv, peer_argv = COMMANDS[w.name](w, run_dir)
                    sides = [("peer", peer_argv)] + [(v, _with(mn_argv, VARIANTS[v])) for v in variants]
                    for side, argv in sides if rep % 2 == 0 else sides[::-1]:
                        result, error = run_side(args.name, argv, nodes, ppn, args.timeout, args.netmod)
                        if error:
                            errors[side] = error
                        else:
                            runs[side].append(result)
                row = {"workload": w.name, "rate": rate, "placement": placement, "errors": errors}
                row["compute_step_s"] = computes.get(w.name)
                for side, results in runs.items():
                    rates = [r["examples_per_s"] for r in results if r.get("examples_per_s")]
                    comm = [r["comm_fraction"] for r in results if r.get("comm_fraction") is not None]
                    row[side] = {
                        "examples_per_s": statistics.median(rates) if rates else None,
                        "comm_fraction": statistics.median(comm) if comm else None,
                        "all": rates,
                        "autotune": [r.get("autotune") for r in results],
                        "blas_threads": [r.get("blas_threads") for r in results],  # rank 0's BLAS pool
                    }
                    for r in results:
                        row.setdefault("grad_bytes", r.get("grad_bytes"))
                        row.setdefault("batch_per_rank", r.get("batch_per_rank"))
                rows.append(row)
                print("# " + json.dumps(row), file=sys.stderr, flush=True)
    finally:
        _sh(["down", "--name", args.name])
    return rows


def _f(v, spec):
    return "-" if v is None else format(v, spec)


def _step_s(row, side):
    """Seconds per step of ``side`` in ``row`` (from its examples/s)."""
    ex_s = row[side]["examples_per_s"]
    nodes, ppn = (int(v) for v in row["placement"].split("x"))
    if not ex_s or not row.get("batch_per_rank"):
        return None
    return row["batch_per_rank"] * nodes * ppn / ex_s


def report(rows, variants):
    print(
        f"\n{'workload':9s} {'link':7s} {'place':5s} {'side':20s} {'ex/s':>8s} {'x peer':>7s} {'comm%':>6s} "
        f"{'x limit':>7s}"
    )
    for row in rows:
        peer = row["peer"]["examples_per_s"]
        limit = limit_step(row)
        for side in ["peer"] + [v for v in variants if v in row]:
            r = row[side]
            ratio = r["examples_per_s"] / peer if r["examples_per_s"] and peer else None
            comm = None if r["comm_fraction"] is None else 100 * r["comm_fraction"]
            step = _step_s(row, side)
            over_limit = step / limit if step and limit else None
            print(
                f"{row['workload']:9s} {row['rate']:7s} {row['placement']:5s} {side:20s} "
                f"{_f(r['examples_per_s'], '8.1f')} {_f(ratio, '7.2f')} {_f(comm, '6.1f')} {_f(over_limit, '7.2f')}"
            )
        if limit:
            print(f"    limit {limit * 1e3:.1f} ms per step (compute {row['compute_step_s'] * 1e3:.1f} ms alone)")
        if "default" in row:
            exact = [v for v in EXACT if v in row and row[v]["examples_per_s"]]
            best = max(exact, key=lambda v: row[v]["examples_per_s"]) if exact else None
            d = row["default"]["examples_per_s"]
            vs_best = d / row[best]["examples_per_s"] if d and best else None
            print(
                f"    default: {_f(d / peer if d and peer else None, '.2f')}x peer, {_f(vs_best, '.2f')}x the best "
                f"exact option ({best}); kept: {', '.join(sorted(set(map(str, row['default']['autotune']))))}"
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
        for side in ["peer"] + [v for v in variants if v in row and v in one]:
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
    parser.add_argument("--no-limits", dest="limits", action="store_false", help="skip the 1-rank compute runs")
    parser.add_argument("--report", nargs="+", default=None, help="print the report of earlier --json files only")
    args = parser.parse_args(argv)
    if args.report:
        rows = []
        for path in args.report:
            with open(path) as f:
                rows += json.load(f)
        report(rows, list(VARIANTS))
        return
    table = SMALL if args.small else FULL
    workloads = [table[n] for n in args.workloads]
    if args.iterations:
        for w in workloads:
            w.iterations = args.iterations
    tmp = tempfile.mkdtemp(prefix="bench_e2e_nodes_")
    rows, computes = [], {}
    for rate in args.rates.split(","):
        rows += measure(args, rate, workloads, tmp, computes)
    report(rows, args.variants)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
