#!/usr/bin/env python
"""Predicted beside measured time per iteration across simulated nodes (issue 39 item 4).

Run (as root, in a source checkout, on a quiet machine):
    flock -x /tmp/mnframe-quiet.lock .venv/bin/python bench/bench_predict_nodes.py \\
        [--rates 1gbit,10gbit] [--placements 2x1,4x1,8x1] [--workloads mnist] [--name hc]

For each rate it brings up one simulated cluster (``scripts/simcluster.sh``, as many nodes as the
largest placement, links capped with tc tbf), and for each placement NODESxRANKS:

1. predicts: ``python -m mnframe --check --world-size P --predict nodes=N,link=RATE,shared=true``
   with the workload's overrides (bench_e2e's mnist or imagenet job, default communicator and wire):
   the compute per rank is measured by that command on this machine, every other constant comes
   from ``communicators/traffic_model.py: CALIBRATION`` (separate microbenchmarks, not these rows);
2. measures: the same job across the cluster's nodes (bench_e2e_nodes' ``run_side``), ms per
   iteration = per-rank batch x P / examples per second after the warm-up.

Each of ``--repeat`` rounds predicts, then measures; the row compares the medians.

It prints both with measured / predicted, and exits 1 when any row is off by more than
``--tolerance`` (25%).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, REPO)

from bench.bench_e2e import COMMANDS, FULL, SMALL  # noqa: E402
from bench.bench_e2e_nodes import _sh, run_side  # noqa: E402

PREDICTED = re.compile(r"^predicted: ([0-9.]+) ms/iteration", re.M)
COMPUTE = re.compile(r"compute per rank: ([0-9.]+) ms")


def _overrides(argv):
    """The mnframe job's overrides (``-m mnframe`` and the probe dropped: --check composes the rest)."""
    return [a for a in argv[2:] if "extensions.probe" not in a]


def predict(w, run_dir, nodes, ppn, rate, extra=()):
    argv, _ = COMMANDS[w.name](w, run_dir)
    argv = argv + list(extra)
    spec = f"nodes={nodes},link={rate},shared=true"
    cmd = [sys.executable, "-m", "mnframe", "--check", "--world-size", str(nodes * ppn), "--predict", spec]
    proc = subprocess.run(cmd + _overrides(argv), capture_output=True, text=True, timeout=600, cwd=REPO, check=False)
    m = PREDICTED.search(proc.stdout)
    if not m:
        raise RuntimeError(f"--predict failed (exit {proc.returncode}): {(proc.stdout + proc.stderr)[-500:]}")
    return float(m.group(1)), float(COMPUTE.search(proc.stdout).group(1)), proc.stdout


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1gbit,10gbit")
    parser.add_argument("--placements", default="2x1,4x1,8x1")
    parser.add_argument("--workloads", nargs="+", choices=sorted(COMMANDS), default=["mnist"])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--small", action="store_true", help="tiny sizes: checks that it runs")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per run")
    parser.add_argument("--tolerance", type=float, default=0.25)
    parser.add_argument("--name", default="pn", help="simulated cluster name")
    parser.add_argument("--netmod", default="ofi", choices=("ofi", "ucx"))
    parser.add_argument("--set", nargs="*", default=[], help="more overrides for both (key=value)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    workloads = [(SMALL if args.small else FULL)[n] for n in args.workloads]
    for w in workloads:
        w.iterations = args.iterations
    placements = [tuple(int(v) for v in p.lower().split("x")) for p in args.placements.split(",")]
    tmp = tempfile.mkdtemp(prefix="bench_predict_nodes_")
    rows = []
    for rate in args.rates.split(","):
        up = _sh(["up", "--name", args.name, "--nodes", str(max(n for n, _ in placements)), "--rate", rate])
        if up.returncode != 0:
            raise SystemExit(f"simcluster up failed: {up.stdout}{up.stderr}")
        try:
            for w in workloads:
                for nodes, ppn in placements:
                    run_dir = os.path.join(tmp, f"{w.name}_{rate}_{nodes}x{ppn}")
                    steps, comm, errors, predictions, computes, loads, kept = [], [], [], [], [], [], []
                    for rep in range(args.repeat):  # each run right after its own prediction
                        predicted, compute, _ = predict(w, f"{run_dir}_check{rep}", nodes, ppn, rate, args.set)
                        predictions.append(predicted)
                        computes.append(compute)
                        loads.append(os.getloadavg()[0])
                        argv, _ = COMMANDS[w.name](w, f"{run_dir}_{rep}")
                        argv = argv + list(args.set)
                        result, error = run_side(args.name, argv, nodes, ppn, args.timeout, args.netmod)
                        if error:
                            errors.append(error)
                        elif result.get("examples_per_s"):
                            steps.append(1e3 * w.batch * nodes * ppn / result["examples_per_s"])
                            comm.append(result.get("comm_fraction"))
                            kept.append(result.get("autotune"))  # the trial's pick; None: no trial
                    measured = statistics.median(steps) if steps else None
                    row = {
                        "workload": w.name,
                        "rate": rate,
                        "placement": f"{nodes}x{ppn}",
                        "compute_ms": statistics.median(computes),
                        "predicted_ms": statistics.median(predictions),
                        "predictions_ms": predictions,
                        "load": loads,
                        "measured_ms": measured,
                        "runs_ms": steps,
                        "comm_fraction": comm,
                        "autotune": kept,
                        "errors": errors,
                    }
                    rows.append(row)
                    print("# " + json.dumps(row), file=sys.stderr, flush=True)
        finally:
            _sh(["down", "--name", args.name])
    bad = 0
    print(
        f"\n{'workload':9s} {'link':7s} {'place':5s} {'compute':>8s} {'predicted':>10s} {'measured':>9s} {'ratio':>6s}"
    )
    for r in rows:
        ratio = r["measured_ms"] / r["predicted_ms"] if r["measured_ms"] else None
        ok = ratio is not None and abs(ratio - 1) <= args.tolerance
        bad += not ok
        print(
            f"{r['workload']:9s} {r['rate']:7s} {r['placement']:5s} {r['compute_ms']:6.1f}ms "
            f"{r['predicted_ms']:8.1f}ms {'-' if ratio is None else format(r['measured_ms'], '7.1f') + 'ms':>9s} "
            f"{'-' if ratio is None else format(ratio, '6.2f')} {'ok' if ok else 'OFF'}"
            + (f"  {r['errors'][0][:200]}" if r["errors"] else "")
        )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if bad:
        print(f"{bad} row(s) off by more than {args.tolerance:.0%}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
