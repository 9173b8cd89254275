"""Gradient averaging between simulated nodes, each figure beside the link's lower bound.

Run (as root, in a source checkout):
    .venv/bin/python bench/bench_nodes.py [--rates 1gbit,10gbit] [--topologies 2x2,3x1] [--repeat 3]

For each rate and topology (NODESxRANKS) it brings up a simulated cluster with
``scripts/simcluster.sh`` (docs/multi_node.md: network namespaces on a bridge,
every node's link capped with tc tbf), runs this file with ``--worker`` under
the cluster's mpiexec, prints the table and takes the cluster down (also on
error; ``SIMCLUSTER_SCRIPT`` overrides the script's path). ``--name`` picks the
cluster name (default ``bn``), ``--netmod`` MPICH's netmod (ofi, the default,
or ucx). Beside the time: the CPU time of one call (the busiest rank's
``process_time``), which a shared machine's load does not inflate.

The worker times ``allreduce_grad`` of a ResNet-50-shaped gradient set
(102.2 MB float32; fresh gradient arrays before each call, as after a backward)
for every mnframe CPU communicator, with float32 and with float16 on the wire,
the default with ``allreduce_grad_dtype=auto`` (its trial calls run first, in the
same run, and it prints what they chose), the bundled chainermn ``naive`` (the peer) and one ``MPI.Allreduce`` of the
whole buffer, round-robin (bench_allreduce.run_round_robin), median of
``--repeat``, a time being the slowest rank's. Beside each figure: the lower
bound, the bytes one node must send over its link divided by the link rate:
2 (N-1)/N of the gradient bytes for N nodes (float32 bytes; a float16 wire
could reach half of it). Results are checked: float32 to 1e-5, float16 within
1e-3 relative (norm of the difference over the norm of the float32 mean).
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIMCLUSTER = os.environ.get("SIMCLUSTER_SCRIPT", os.path.join(ROOT, "scripts", "simcluster.sh"))
CPU_NAMES = ("naive", "flat", "hierarchical", "two_dimensional")  # single_node refuses several nodes
HALF_NAMES = ("flat", "hierarchical", "two_dimensional")


def rate_bytes(rate):
    """tc's rate units ("1gbit", "100mbit") -> bytes per second."""
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3, "bit": 1.0}
    for suffix, bits in units.items():
        if rate.endswith(suffix):
            return float(rate[: -len(suffix)]) * bits / 8
    raise ValueError(f"rate {rate!r}: use tc units such as 1gbit or 100mbit")


def bound_seconds(nbytes, nodes, rate):
    """The least time to average ``nbytes`` over ``nodes`` nodes: what one node must send / link rate."""
    return 2 * (nodes - 1) / nodes * nbytes / rate_bytes(rate) if nodes > 1 else 0.0


# ------------------------------------------------------------------ worker (under mpiexec)


def auto_trials(comm, contender):
    """Run the trial calls of ``allreduce_grad_dtype=auto``; what they measured and chose."""
    from mnframe.communicators import wire_choice

    for _ in wire_choice._SCHEDULE:
        contender.before()
        contender.fn()
    for key, (half_s, own_s) in comm._wire_choice.decisions.items():
        wire = comm._wire_choice.wire_for(key)
        return {"float16 ms": half_s * 1e3, "float32 ms": own_s * 1e3, "wire": wire or "float32"}
    return {}


def worker(args):
    sys.path.insert(0, HERE)
    import numpy as np
    from bench_allreduce import Contender, base_grads, build_model, run_round_robin, set_grads

    import mnframe as chainermn

    world = chainermn.create_communicator("naive").mpi_comm
    model = build_model(args.small)
    base = base_grads(model)
    nbytes = sum(b.nbytes for b in base)
    want = [b.astype(np.float64) * (world.size + 1) / 2 for b in base]

    def checker(m, label, rtol):
        def check():
            got = [p.grad.astype(np.float64) for _, p in sorted(m.namedparams())]
            err = np.sqrt(sum(((g - w) ** 2).sum() for g, w in zip(got, want)))
            ref = np.sqrt(sum((w**2).sum() for w in want))
            errs = world.allgather(err / ref)
            if max(errs) > rtol:
                raise AssertionError(f"{label}: relative error {max(errs):.2e} > {rtol}")
            return max(errs)

        return check

    contenders, checks, comms = [], {}, []

    cpu = {}

    def timed_cpu(label, fn):
        def call():
            t0 = time.process_time()
            fn()
            cpu.setdefault(label, []).append(time.process_time() - t0)

        return call

    def add(label, comm, rtol):
        comms.append(comm)
        m = model.copy(mode="share")  # parameters shared (memory), gradients set per copy
        keep = []
        set_grads(m, base, world.rank, keep)
        fn = timed_cpu(label, lambda: comm.allreduce_grad(m))
        c = Contender(label, fn, before=lambda: set_grads(m, base, world.rank, keep))
        contenders.append(c)
        checks[label] = checker(m, label, rtol)

    names = args.names.split(",") if args.names else CPU_NAMES
    for name in names:
        add(f"mnframe {name}", chainermn.create_communicator(name), 1e-5)
    for name in [n for n in names if n in HALF_NAMES]:
        add(f"mnframe {name} float16", chainermn.create_communicator(name, allreduce_grad_dtype="float16"), 1e-3)
    chose = {}
    if "two_dimensional" in names:  # allreduce_grad_dtype=auto: its trial calls first, in this run
        comm = chainermn.create_communicator("two_dimensional", allreduce_grad_dtype="auto")
        add("mnframe two_dimensional auto", comm, 1e-3)
        chose = auto_trials(comm, contenders[-1])
        cpu.pop("mnframe two_dimensional auto", None)
    import chainermn as peer  # the bundled peer, benchmark only

    add("chainermn naive", peer.create_communicator("naive"), 1e-5)
    from mpi4py import MPI

    a = np.ones(nbytes // 4, np.float32)
    label = "MPI.Allreduce (whole buffer)"
    contenders.append(Contender(label, timed_cpu(label, lambda: world.Allreduce(MPI.IN_PLACE, a))))
    results = run_round_robin(contenders, args.repeat, args.warmup)
    import statistics

    cpu_s = {k: max(world.allgather(statistics.median(v[args.warmup :] or v))) for k, v in cpu.items()}
    load = os.getloadavg()[0]
    errors = {label: check() for label, check in checks.items()}
    topo = chainermn.create_communicator("naive")
    if world.rank == 0:
        out = {
            "results": results,
            "cpu": cpu_s,
            "load": load,
            "errors": errors,
            "nbytes": nbytes,
            "nodes": topo.inter_size,
            "ppn": topo.intra_size,
            "auto_choice": chose,
        }
        print("RESULT " + json.dumps(out), flush=True)
    for comm in comms + [topo]:  # shared-memory windows freed before MPI_Finalize (OFI needs it)
        comm.finalize()


# ------------------------------------------------------------------ driver (on the machine)


def _sh(*args, timeout=180, env=None):
    return subprocess.run(
        ["bash", SIMCLUSTER, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def run_one(args, nodes, ppn, rate):
    name = args.name
    up = _sh("up", "--name", name, "--nodes", str(nodes), "--rate", rate)
    if up.returncode != 0:
        raise RuntimeError(f"simcluster up failed: {up.stdout}{up.stderr}")
    try:
        env = dict(os.environ, MPIEXEC=os.path.join(ROOT, ".venv", "bin", "mpiexec"), OMP_NUM_THREADS="1")
        argv = ["mpiexec", "--name", name, "--ppn", str(ppn), "--netmod", args.netmod, "--"]
        argv += [sys.executable, os.path.abspath(__file__), "--worker", "--repeat", str(args.repeat)]
        argv += ["--warmup", str(args.warmup)] + (["--small"] if args.small else [])
        argv += ["--names", args.names] if args.names else []
        t0 = time.time()
        proc = _sh(*argv, timeout=args.timeout, env=env)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 and lines:
            print(f"warning: the worker exited {proc.returncode} after its results: {proc.stderr[-300:]}")
        if not lines:
            raise RuntimeError(f"worker failed ({proc.returncode}): {proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        out = json.loads(lines[-1][len("RESULT ") :])
        out["wall"] = time.time() - t0
        return out
    finally:
        _sh("down", "--name", name)


def report(out, rate, args):
    nodes, ppn, nbytes = out["nodes"], out["ppn"], out["nbytes"]
    bound = bound_seconds(nbytes, nodes, rate)
    res = out["results"]
    peer = res["chainermn naive"]
    print(
        f"\n{nodes} nodes x {ppn} ranks, links {rate} ({rate_bytes(rate) / 1e6:.0f} MB/s), "
        f"{nbytes / 1e6:.1f} MB float32, median of {args.repeat}; bound = 2(N-1)/N x bytes / rate = "
        f"{bound * 1e3:.0f} ms (float16 wire: {bound * 500:.0f} ms)"
    )
    print(f"  (machine load average {out.get('load', 0):.1f} during the run)")
    print(f"  {'contender':34s} {'time':>9s} {'bound':>8s} {'x bound':>8s} {'x peer':>7s} {'cpu':>7s}  rel. error")
    for label, t in res.items():
        err = out["errors"].get(label)
        err_s = "" if err is None else f"{err:.1e}"
        c = out.get("cpu", {}).get(label)
        c_s = "-" if c is None else f"{c * 1e3:.0f}ms"
        print(
            f"  {label:34s} {t * 1e3:7.0f}ms {bound * 1e3:6.0f}ms {t / bound:8.2f} {t / peer:7.2f} {c_s:>7s}  {err_s}"
        )
    d, h = res.get("mnframe two_dimensional"), res.get("mnframe two_dimensional float16")
    if d is not None and rate == "1gbit" and not args.small:
        print(f"  default within 1.1x of the bound: {d / bound:.2f}x -> {'PASS' if d <= 1.1 * bound else 'FAIL'}")
    limit = 0.6 if rate == "1gbit" else 1.0
    if d is not None and h is not None and not args.small:
        verdict = "PASS" if h <= limit * d else "FAIL"
        print(f"  float16 / float32 (two_dimensional): {h / d:.2f} (target <= {limit}) -> {verdict}")
    a, chose = res.get("mnframe two_dimensional auto"), out.get("auto_choice") or {}
    if d is not None and a is not None and chose:
        print(
            f"  auto chose {chose['wire']} (trial medians: float16 {chose['float16 ms']:.0f} ms, float32 "
            f"{chose['float32 ms']:.0f} ms); auto / float32: {a / d:.2f}"
            + ("" if args.small else f" (target <= {limit}) -> {'PASS' if a <= limit * d else 'FAIL'}")
        )
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rates", default="1gbit,10gbit")
    parser.add_argument("--topologies", default="2x2,3x1", help="NODESxRANKS_PER_NODE, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--names", default="", help="mnframe communicators (default: every CPU one)")
    parser.add_argument("--name", default="bn", help="simulated cluster name (1-8 of a-z0-9)")
    parser.add_argument("--netmod", default="ofi", choices=("ofi", "ucx"))
    parser.add_argument("--small", action="store_true", help="a tiny model: a check that it runs")
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument("--json", default="", help="also write every result to this file")
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    from mnframe.communicators import half_native

    print(f"float16 conversions: {half_native.describe()}")
    everything = []
    for rate in args.rates.split(","):
        for topo in args.topologies.split(","):
            nodes, ppn = (int(v) for v in topo.lower().split("x"))
            out = run_one(args, nodes, ppn, rate)
            out["rate"] = rate
            everything.append(out)
            report(out, rate, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(everything, f, indent=1)


if __name__ == "__main__":
    main()
