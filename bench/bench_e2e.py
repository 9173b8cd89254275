#!/usr/bin/env python
"""End-to-end training throughput: mnframe vs chainer's bundled chainermn (issue 8, target 3).

For each workload and rank count, runs ``python -m mnframe recipe=...`` and the
equivalent plain ChainerMN script (bench/peer/) with the same model, per-rank
batch size and data, alternately, ``--repeat`` times, and prints the medians:

    workload  ranks  mnframe ex/s  peer ex/s  ratio  ratio (best runs)  paired ratio  comm% mnframe  comm% peer  verdict

Examples/s are global (all ranks) over the steps after a warm-up, medians of
the repetitions; "ratio (best runs)" compares each side's fastest run, which is
less sensitive to other load on a shared machine; "paired ratio" is the median
over repetitions of mnframe's rate over the peer's in the same repetition (the
two runs are next to each other in time, so a machine that slows down for a
while slows both: the estimate that drift disturbs least); comm% is the share of a
step spent in gradient averaging (``multi_node_mean_grad`` /
``allreduce_grad``, including the wait for the slower rank); the verdict is
PASS when mnframe is not slower (paired ratio >= 1.0).

Threads: both sides run without OMP/OPENBLAS/MKL/BLIS_NUM_THREADS, as a user
runs them: the peer's BLAS starts one thread per core in every rank, mnframe's
``trainer.threads=auto`` gives each rank its share of the cores.
``--omp-threads N`` sets the variables to N for both sides (like with like).

Communicators: mnframe uses its default CPU communicator (``two_dimensional``:
a shared-memory reduce-scatter within the node) and the peer ``naive`` (the only one
chainermn runs without CuPy); ``--communicator naive`` compares like with like.

Workloads: ``mnist`` (the recipe's MLP, 1000 units, on scikit-learn digits, Adam:
mnframe's ``optimizer=adam`` against ``chainer.optimizers.Adam``, bitwise the same
updates; 50 examples per rank) and ``imagenet`` (NIN at width 0.5 on 64x64 synthetic
images, 100 classes, MomentumSGD + weight decay, 16 per rank, serial loader).

    python bench/bench_e2e.py              # full run (about 10 minutes on 2 idle cores)
    python bench/bench_e2e.py --small      # quick correctness mode (CI): tiny sizes, one repetition
"""

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, REPO)

from bench.peer.probe import parse_result  # noqa: E402
from mnframe.testing.launch import run_mpi  # noqa: E402

PROBE = "bench.peer.probe.Probe"


@dataclasses.dataclass
class Workload:
    """One benchmark workload: the sizes both sides use."""

    name: str
    iterations: int
    warmup: int
    batch: int
    params: dict  # workload-specific sizes
    communicator: str = "two_dimensional"  # mnframe's side (its default CPU communicator)
    peer_communicator: str = "naive"  # the peer's (chainermn's only CPU communicator)


FULL = {
    "mnist": Workload("mnist", iterations=200, warmup=10, batch=50, params={"units": 1000}),
    "imagenet": Workload(
        "imagenet",
        iterations=60,
        warmup=5,
        batch=16,
        params={"arch": "nin", "insize": 64, "width": 0.5, "n_class": 100, "n_synthetic": 256},
    ),
}
SMALL = {
    "mnist": Workload("mnist", iterations=8, warmup=2, batch=20, params={"units": 32}),
    "imagenet": Workload(
        "imagenet",
        iterations=5,
        warmup=2,
        batch=4,
        params={"arch": "nin", "insize": 64, "width": 0.125, "n_class": 10, "n_synthetic": 32},
    ),
}

# imagenet architecture name (peer --arch) -> the class the mnframe recipe's model._target_ names
ARCH_TARGETS = {"alex": "AlexNet", "nin": "NIN", "googlenetbn": "GoogLeNetBN", "resnet50": "ResNet50"}


def _mnframe_common(w, run_dir):
    return [
        "-m",
        "mnframe",
        f"communicator={w.communicator}",
        f"trainer.stop=[{w.iterations},iteration]",
        "trainer.device=cpu",
        "extensions=minimal",
        "extensions.log_report.enabled=false",
        "checkpoint.interval=1000000",
        "resume=never",
        f"dataset.batch_size={w.batch}",
        f"hydra.run.dir={run_dir}",
        f"+extensions.probe._target_={PROBE}",
        "+extensions.probe.unit=iteration",
        "+extensions.probe.interval=1",
        "+extensions.probe.rank0_only=true",
        f"+extensions.probe.kwargs={{warmup:{w.warmup},label:mnframe}}",
    ]


def mnist_commands(w, run_dir):
    """(mnframe argv, peer argv) for the mnist workload."""
    p = w.params
    mnframe = _mnframe_common(w, run_dir) + ["recipe=mnist", f"model.n_units={p['units']}"]
    peer = [
        os.path.join(REPO, "bench", "peer", "train_mnist.py"),
        "--iterations",
        w.iterations,
        "--batchsize",
        w.batch,
        "--unit",
        p["units"],
        "--warmup",
        w.warmup,
        "--out",
        run_dir + "_peer",
        "--communicator",
        w.peer_communicator,
    ]
    return mnframe, peer


def imagenet_commands(w, run_dir):
    """(mnframe argv, peer argv) for the imagenet workload (synthetic images)."""
    p = w.params
    mnframe = _mnframe_common(w, run_dir) + [
        "recipe=imagenet",
        f"model._target_=mnframe.recipes.imagenet.models.{ARCH_TARGETS[p['arch']]}",
        f"model.width={p['width']}",
        f"model.n_class={p['n_class']}",
        "dataset.source.synthetic=true",
        f"dataset.source.insize={p['insize']}",
        f"dataset.source.n_class={p['n_class']}",
        f"dataset.source.n_synthetic={p['n_synthetic']}",
        "dataset.loader=serial",
    ]
    peer = [
        os.path.join(REPO, "bench", "peer", "train_imagenet.py"),
        "--arch",
        p["arch"],
        "--iterations",
        w.iterations,
        "--batchsize",
        w.batch,
        "--insize",
        p["insize"],
        "--width",
        p["width"],
        "--n-class",
        p["n_class"],
        "--n-synthetic",
        p["n_synthetic"],
        "--loader",
        "serial",
        "--warmup",
        w.warmup,
        "--out",
        run_dir + "_peer",
        "--communicator",
        w.peer_communicator,
    ]
    return mnframe, peer


COMMANDS = {"mnist": mnist_commands, "imagenet": imagenet_commands}


def thread_env(omp_threads):
    """The thread variables both sides run with: none by default (as a user runs them;
    BLAS then starts one thread per core in every rank unless the framework sizes the
    pools, which mnframe's ``trainer.threads=auto`` does), or ``N`` for both."""
    from mnframe.runtime.threads import ENV_VARS

    return {var: (None if omp_threads is None else str(omp_threads)) for var in ENV_VARS}


def run_side(argv, ranks, timeout, omp_threads=None):
    """Run one side under mpiexec; return (result dict or None, error text or None)."""
    env = {
        "BENCH_T0": repr(time.time()),
        "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
        **thread_env(omp_threads),
    }
    res = run_mpi(argv, n=ranks, timeout=timeout, env=env, cwd=REPO)
    result = parse_result(res.stdout)
    if res.timed_out:
        return None, f"timed out after {timeout}s"
    if res.returncode != 0 or result is None:
        tail = [line for line in res.output.strip().splitlines() if line.strip()][-3:]
        return None, f"exit {res.returncode}: " + " | ".join(tail)[-300:]
    result["wall_s"] = res.elapsed
    return result, None


def _median(results, key):
    values = [r[key] for r in results if r.get(key) is not None]
    return statistics.median(values) if values else None


def measure(workloads, ranks_list, repeat, timeout, omp_threads=None):
    """Rows of the table: one per (workload, ranks), with the medians of both sides."""
    rows = []
    tmp = tempfile.mkdtemp(prefix="bench_e2e_")
    for w in workloads:
        for ranks in ranks_list:
            sides = {"mnframe": [], "peer": []}
            errors = {}
            paired = []  # per repetition: mnframe / peer, the two runs next to each other in time
            for rep in range(repeat):
                mn_argv, peer_argv = COMMANDS[w.name](w, os.path.join(tmp, f"{w.name}_n{ranks}_r{rep}"))
                order = (("mnframe", mn_argv), ("peer", peer_argv))
                this_rep = {}
                for side, argv in order if rep % 2 == 0 else order[::-1]:  # alternate who goes first
                    result, error = run_side(argv, ranks, timeout, omp_threads)
                    if error:
                        errors[side] = error
                    else:
                        sides[side].append(result)
                        this_rep[side] = result.get("examples_per_s")
                if this_rep.get("mnframe") and this_rep.get("peer"):
                    paired.append(this_rep["mnframe"] / this_rep["peer"])
            row = {"workload": w.name, "ranks": ranks, "errors": errors}
            for side, results in sides.items():
                row[side] = {
                    k: _median(results, k)
                    for k in ("examples_per_s", "comm_fraction", "step_s", "first_iteration_s", "wall_s")
                }
                row[side]["runs"] = len(results)
                rates = [r["examples_per_s"] for r in results if r.get("examples_per_s")]
                row[side]["best_examples_per_s"] = max(rates) if rates else None
                row[side]["all_examples_per_s"] = rates  # every run, in order (for the JSON)
            mn, peer = row["mnframe"]["examples_per_s"], row["peer"]["examples_per_s"]
            row["ratio"] = mn / peer if mn and peer else None
            best_mn, best_peer = row["mnframe"]["best_examples_per_s"], row["peer"]["best_examples_per_s"]
            row["best_ratio"] = best_mn / best_peer if best_mn and best_peer else None
            row["paired_ratio"] = statistics.median(paired) if paired else None
            row["verdict"] = (
                "n/a" if row["paired_ratio"] is None else ("PASS" if row["paired_ratio"] >= 1.0 else "FAIL")
            )
            rows.append(row)
            print(f"# {w.name} n={ranks}: " + json.dumps(row), file=sys.stderr, flush=True)
    return rows


def _fmt(value, spec):
    return "-" if value is None else format(value, spec)


def table(rows):
    head = (
        "workload",
        "ranks",
        "mnframe ex/s",
        "peer ex/s",
        "ratio",
        "ratio (best runs)",
        "paired ratio",
        "comm% mnframe",
        "comm% peer",
        "verdict",
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        mn, peer = r["mnframe"], r["peer"]
        pct = lambda v: _fmt(None if v is None else 100 * v, ".1f")  # noqa: E731
        lines.append(
            "| "
            + " | ".join(
                [
                    r["workload"],
                    str(r["ranks"]),
                    _fmt(mn["examples_per_s"], ".1f"),
                    _fmt(peer["examples_per_s"], ".1f"),
                    _fmt(r["ratio"], ".3f"),
                    _fmt(r["best_ratio"], ".3f"),
                    _fmt(r["paired_ratio"], ".3f"),
                    pct(mn["comm_fraction"]),
                    pct(peer["comm_fraction"]),
                    r["verdict"],
                ]
            )
            + " |"
        )
    for r in rows:
        for side, error in r["errors"].items():
            lines.append(f"- {r['workload']} n={r['ranks']} {side}: {error}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="tiny sizes, one repetition: checks that both sides run")
    parser.add_argument("--workloads", nargs="+", choices=sorted(COMMANDS), default=["mnist", "imagenet"])
    parser.add_argument("--ranks", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--repeat", type=int, default=None, help="runs per side (default 3, 1 with --small)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per run (default 600, 120 with --small)")
    parser.add_argument(
        "--communicator",
        default="two_dimensional",
        help="mnframe's communicator (default two_dimensional, its default on CPUs; naive compares like with like)",
    )
    parser.add_argument(
        "--peer-communicator", default="naive", help="the peer's communicator (chainermn has only naive on CPUs)"
    )
    parser.add_argument(
        "--omp-threads",
        type=int,
        default=None,
        help="set OMP/OPENBLAS/MKL_NUM_THREADS to N for both sides (default: unset for both, as users run them)",
    )
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)

    sizes = SMALL if args.small else FULL
    repeat = args.repeat or (1 if args.small else 3)
    timeout = args.timeout or (120 if args.small else 600)
    workloads = [
        dataclasses.replace(sizes[name], communicator=args.communicator, peer_communicator=args.peer_communicator)
        for name in args.workloads
    ]
    rows = measure(workloads, args.ranks, repeat, timeout, args.omp_threads)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    # --small checks correctness: both sides must have produced a result
    if args.small:
        broken = [f"{r['workload']} n={r['ranks']}" for r in rows if r["errors"]]
        if broken:
            print("FAILED: " + ", ".join(broken), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
