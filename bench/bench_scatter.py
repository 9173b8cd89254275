"""scatter_dataset, side by side: mnframe vs the bundled chainermn (issue 8, target 2).

Run:  .venv/bin/mpiexec -n 2 .venv/bin/python bench/bench_scatter.py [--size-gib 1] [--small] [--repeat N]

Scatters a TupleDataset of NumPy arrays (float32 images of 3x32x32 + int32
labels, ``--size-gib`` in total) with ``shuffle=True, seed=0`` from rank 0.
Each side runs in its own ``mpiexec`` child job (so each rank's peak RSS,
``ru_maxrss``, belongs to that side alone); the launched rank 0 drives them,
the other launched ranks exit. A time is the max over ranks of one call,
median of ``--repeat`` calls. Both sides use the same seed, so their shards
must hold the same examples: every run checks that (labels are example ids).
Targets: mnframe >= 5x faster than chainermn, and the non-root peak memory
<= 40% of chainermn's. ``--small``: a few MiB, correctness only (for CI).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ROW_SHAPE = (3, 32, 32)
ROW_BYTES = 4 * 3 * 32 * 32 + 4
SPEED_TARGET = 5.0
MEMORY_TARGET = 0.40


# ---- worker: one side, inside its own MPI job ---------------------------------------------


def _peak_rss_bytes():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _shard_ids(shard):
    """Example ids (labels) of a shard, whatever type the side returned."""
    import numpy as np

    if hasattr(shard, "_datasets"):  # mnframe: a TupleDataset of the shard's arrays
        return np.asarray(shard._datasets[1])
    return np.fromiter((shard[i][1] for i in range(len(shard))), np.int64, len(shard))


def _shard_check(shard):
    """A fingerprint of which examples a shard holds, and whether sampled rows are intact."""
    import numpy as np

    ids = _shard_ids(shard)
    # image row i is filled with its id: check a sample of rows
    sample = range(0, len(shard), max(1, len(shard) // 64))
    rows_ok = all(float(shard[i][0][0, 0, 0]) == float(shard[i][1]) for i in sample)
    xor = int(np.bitwise_xor.reduce(ids)) if len(ids) else 0
    return {
        "n": int(len(ids)),
        "ids_sum": int(ids.sum()),
        "ids_xor": xor,
        "first": ids[:8].tolist(),
        "rows_ok": bool(rows_ok),
    }


def worker(side, size_gib, repeat):
    import numpy as np
    from mpi4py import MPI
    import mnframe  # noqa: F401  (NumPy compatibility shim before chainer)
    import chainer

    world = MPI.COMM_WORLD
    if side == "mnframe":
        comm = mnframe.create_communicator("naive")
        scatter = mnframe.scatter_dataset
    else:
        import chainermn

        comm = chainermn.create_communicator("naive")
        scatter = chainermn.scatter_dataset

    n = max(world.size, int(size_gib * 2**30) // ROW_BYTES)
    dataset = None
    if world.rank == 0:
        x = np.empty((n,) + ROW_SHAPE, np.float32)
        x.reshape(n, -1)[:] = np.arange(n, dtype=np.float32)[:, None]  # row i holds i
        dataset = chainer.datasets.TupleDataset(x, np.arange(n, dtype=np.int32))
    times, shard = [], None
    for _ in range(repeat):
        shard = None  # free the previous shard first: peak memory is one shard
        world.Barrier()
        t0 = time.perf_counter()
        shard = scatter(dataset, comm, shuffle=True, seed=0)
        elapsed = time.perf_counter() - t0
        times.append(world.allreduce(elapsed, op=MPI.MAX))
    check = _shard_check(shard)
    rss = world.gather(_peak_rss_bytes(), root=0)
    checks = world.gather(check, root=0)
    if world.rank == 0:
        print("RESULT " + json.dumps({"side": side, "n": n, "times": times, "rss": rss, "checks": checks}), flush=True)


# ---- driver: launches one MPI job per side and prints the table ---------------------------


def _child_env():
    """The environment without the outer mpiexec's process-manager variables."""
    drop = ("PMI_", "HYDRA_", "MPI_LOCAL", "PMIX_", "OMPI_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def run_side(side, args, n_ranks):
    from mnframe.testing.launch import mpiexec_path

    cmd = [
        mpiexec_path(),
        "-n",
        str(n_ranks),
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        side,
        "--size-gib",
        str(args.size_gib),
        "--repeat",
        str(args.repeat),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_child_env(), timeout=args.timeout, cwd=ROOT)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise SystemExit(f"{side} side failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def driver(args):
    n_ranks = int(os.environ.get("PMI_SIZE", "2"))
    if int(os.environ.get("PMI_RANK", "0")) != 0:
        return 0  # the launched rank 0 drives; the others have nothing to do
    sides = ("mnframe",) if args.only_mnframe else ("mnframe", "chainermn")
    results = {side: run_side(side, args, n_ranks) for side in sides}
    if args.only_mnframe:
        return _report_one(results["mnframe"], n_ranks)
    mn, peer = results["mnframe"], results["chainermn"]
    same_shards = mn["checks"] == peer["checks"]
    rows_ok = all(c["rows_ok"] for r in results.values() for c in r["checks"])
    t_mn, t_peer = statistics.median(mn["times"]), statistics.median(peer["times"])
    nonroot_mn = max(mn["rss"][1:], default=mn["rss"][0])
    nonroot_peer = max(peer["rss"][1:], default=peer["rss"][0])
    speedup = t_peer / t_mn if t_mn > 0 else float("inf")
    mem_ratio = nonroot_mn / nonroot_peer
    gib = mn["n"] * ROW_BYTES / 2**30

    print(
        f"scatter_dataset of a {gib:.3f} GiB TupleDataset (float32 3x32x32 + int32), shuffle=True, "
        f"{n_ranks} ranks, median of {args.repeat}"
    )
    print(f"{'side':<12}{'time s':>10}{'root peak MB':>15}{'non-root peak MB':>19}")
    for side, r in results.items():
        nonroot = max(r["rss"][1:], default=r["rss"][0])
        print(f"{side:<12}{statistics.median(r['times']):>10.3f}{r['rss'][0] / 1e6:>15.0f}{nonroot / 1e6:>19.0f}")
    print(
        f"speed-up (chainermn / mnframe): {speedup:.2f}x   non-root memory ratio (mnframe / chainermn): {mem_ratio:.2f}"
    )
    print(f"shards identical on both sides: {same_shards}; rows intact: {rows_ok}")
    ok = same_shards and rows_ok
    if args.small:
        print("correctness:", "PASS" if ok else "FAIL", "(--small: speed and memory not judged)")
    else:
        print(f"speed  target >= {SPEED_TARGET:.0f}x:", "PASS" if speedup >= SPEED_TARGET else "FAIL")
        print(f"memory target <= {MEMORY_TARGET:.0%}:", "PASS" if mem_ratio <= MEMORY_TARGET else "FAIL")
        print("correctness:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


def _report_one(mn, n_ranks):
    """--only-mnframe: sizes the peer cannot handle (e.g. shards over 2 GiB); checks the shards."""
    import numpy as np

    n = mn["n"]
    got = sorted((c["n"], c["ids_sum"]) for c in mn["checks"])
    size = n_ranks
    length = -(-n // size)
    order = np.random.RandomState(0).permutation(n)
    want = sorted((length, int(order[n * i // size : n * i // size + length].sum())) for i in range(size))
    ok = got == want and all(c["rows_ok"] for c in mn["checks"])
    median = statistics.median(mn["times"])
    print(
        f"mnframe only: {n * ROW_BYTES / 2**30:.3f} GiB, {n_ranks} ranks, median {median:.3f} s, "
        f"largest shard {length * ROW_BYTES / 2**30:.3f} GiB, peak RSS MB {[round(r / 1e6) for r in mn['rss']]}"
    )
    print("correctness:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gib", type=float, default=1.0, help="dataset size (default 1 GiB)")
    parser.add_argument("--small", action="store_true", help="4 MiB, 2 repeats: correctness only")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per side (median)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per side")
    parser.add_argument(
        "--only-mnframe",
        action="store_true",
        help="skip the peer (for sizes it cannot scatter, e.g. > 2 GiB per shard)",
    )
    parser.add_argument("--worker", choices=("mnframe", "chainermn"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.small:
        args.size_gib, args.repeat = 4 / 1024, 2
    if args.worker:
        worker(args.worker, args.size_gib, args.repeat)
        return 0
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
