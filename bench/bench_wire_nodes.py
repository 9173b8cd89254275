"""The exchange between nodes alone, on the mnist MLP's gradient bytes: mnframe's pipeline vs MPI.

Run (as root, in a source checkout):
    .venv/bin/python bench/bench_wire_nodes.py [--rate 10gbit] [--nodes 2] [--repeat 30] [--name hd]

Brings up a simulated cluster (``scripts/simcluster.sh``, one rank per node, links
capped with tc tbf), runs this file with ``--worker`` under its mpiexec and takes the
cluster down. The worker times, round-robin (bench_allreduce.run_round_robin: the
slowest rank's time, median of ``--repeat``), on ``--elements`` float32 (default
1,076,010: the mnist MLP with 1000 units, 4.3 MB):

* ``exchange, CHUNK`` : ``wire_allreduce.allreduce_exchange`` (the float32 path of
  two_dimensional between nodes) with ``CHUNK_BYTES`` set to CHUNK;
* ``MPI.Allreduce``: one in-place ``MPI_Allreduce`` of the same bytes;
* ``MPI.Allreduce per parameter``: one per mnist parameter (what the peer's ``naive`` does);
* ``Isend/Irecv whole + Waitall``: each rank sends the other its whole array in one
  message and waits (2 nodes only): the raw cost of moving the bytes with one message;
* ``2dim allreduce_grad``: the two_dimensional communicator's whole call on the mnist shapes.

Every exchange result is checked bitwise against ``MPI.Allreduce`` at 2 nodes.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIMCLUSTER = os.environ.get("SIMCLUSTER_SCRIPT", os.path.join(ROOT, "scripts", "simcluster.sh"))
MNIST_SHAPES = [(1000, 64), (1000,), (1000, 1000), (1000,), (10, 1000), (10,)]


def _exchange(world, buf, chunk):
    """``allreduce_exchange`` of ``buf`` with ``CHUNK_BYTES`` = ``chunk``."""
    from mnframe.communicators import wire_allreduce

    def fn():
        old = wire_allreduce.CHUNK_BYTES
        wire_allreduce.CHUNK_BYTES = chunk
        try:
            wire_allreduce.allreduce_exchange(world, buf)
        finally:
            wire_allreduce.CHUNK_BYTES = old

    return fn


def _mpi_contenders(world, buf, refill):
    """MPI_Allreduce of the whole buffer, per mnist parameter, and (2 ranks) one raw message each way."""
    import numpy as np
    from bench_allreduce import Contender
    from mpi4py import MPI

    out = [Contender("MPI.Allreduce", lambda: world.Allreduce(MPI.IN_PLACE, buf), before=refill)]
    bounds = np.cumsum([0] + [int(np.prod(s)) for s in MNIST_SHAPES]).tolist()
    if bounds[-1] <= buf.size:
        views = [buf[a:b] for a, b in zip(bounds, bounds[1:])]
        out.append(
            Contender(
                "MPI.Allreduce per parameter", lambda: [world.Allreduce(MPI.IN_PLACE, v) for v in views], before=refill
            )
        )
    if world.size == 2:
        other = np.empty_like(buf)

        def raw():
            q = 1 - world.rank
            MPI.Request.Waitall([world.Irecv(other, q, 77), world.Isend(buf, q, 77)])

        out.append(Contender("Isend/Irecv whole + Waitall", raw, before=refill))
    return out


def _two_dimensional(rng, gemm):
    """(contender, communicator): two_dimensional's ``allreduce_grad`` of the mnist MLP's gradients."""
    import chainer
    import chainer.links as L
    import numpy as np
    from bench_allreduce import Contender

    import mnframe as chainermn

    model = chainer.Sequential(L.Linear(64, 1000), L.Linear(1000, 1000), L.Linear(1000, 10))
    model(np.zeros((1, 64), np.float32))
    comm = chainermn.create_communicator("two_dimensional")
    grads = [rng.standard_normal(p.shape).astype(np.float32) for _, p in sorted(model.namedparams())]

    def fresh():
        gemm()
        for (_, p), g in zip(sorted(model.namedparams()), grads):
            p.grad = g.copy()

    return Contender("2dim allreduce_grad", lambda: comm.allreduce_grad(model), before=fresh), comm


def worker(args):
    sys.path.insert(0, HERE)
    import numpy as np
    from bench_allreduce import Contender, run_round_robin
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    if args.threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=args.threads)
    rng = np.random.default_rng(world.rank)
    base = rng.standard_normal(args.elements).astype(np.float32)
    buf = base.copy()
    square = rng.standard_normal((args.gemm, args.gemm)).astype(np.float32) if args.gemm else None

    def gemm():  # as after a backward: BLAS's worker threads still spin during the call
        if square is not None:
            square @ square

    def refill():
        buf[:] = base
        gemm()

    contenders = [
        Contender(f"exchange, {c >> 10} KiB chunks", _exchange(world, buf, c), before=refill) for c in args.chunks
    ]
    contenders += _mpi_contenders(world, buf, refill)
    comms = []
    if args.elements == sum(int(np.prod(s)) for s in MNIST_SHAPES):
        c, comm = _two_dimensional(rng, gemm)
        contenders.append(c)
        comms.append(comm)
    # bitwise check: every exchange = MPI.Allreduce (at 2 ranks: a + b either way)
    refill()
    want = buf.copy()
    world.Allreduce(MPI.IN_PLACE, want)
    bad = []
    for chunk in args.chunks:
        refill()
        _exchange(world, buf, chunk)()
        if not np.array_equal(buf.view(np.uint32), want.view(np.uint32)):
            bad.append(chunk)
    results = run_round_robin(contenders, args.repeat, 2)
    times = {c.label: c.times for c in contenders}
    if world.rank == 0:
        out = {"results": results, "times": times, "load": os.getloadavg()[0], "size": world.size, "bad": bad}
        print("RESULT " + json.dumps(out), flush=True)
    for comm in comms:
        comm.finalize()


def _sh(*args, timeout=180, env=None):
    return subprocess.run(
        ["bash", SIMCLUSTER, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rate", default="10gbit")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--elements", type=int, default=1_076_010)
    parser.add_argument("--chunks", type=int, nargs="+", default=[2 << 20])
    parser.add_argument("--gemm", type=int, default=0, help="N: an NxN float32 matmul before every call")
    parser.add_argument("--threads", type=int, default=0, help="BLAS threads per rank (0: as the library starts)")
    parser.add_argument("--name", default="bw")
    parser.add_argument("--netmod", default="ofi", choices=("ofi", "ucx"))
    parser.add_argument("--env", nargs="*", default=[], help="KEY=VALUE for every rank (mpiexec -genv)")
    parser.add_argument("--timeout", type=int, default=300)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    up = _sh("up", "--name", args.name, "--nodes", str(args.nodes), "--rate", args.rate)
    if up.returncode != 0:
        raise SystemExit(f"simcluster up failed: {up.stdout}{up.stderr}")
    try:
        env = dict(os.environ, MPIEXEC=os.path.join(ROOT, ".venv", "bin", "mpiexec"), OMP_NUM_THREADS="1")
        genv = [x for kv in args.env for x in ["-genv", *kv.split("=", 1)]]
        argv = ["mpiexec", "--name", args.name, "--ppn", "1", "--netmod", args.netmod, "--", *genv]
        argv += [sys.executable, os.path.abspath(__file__), "--worker", "--repeat", str(args.repeat)]
        argv += ["--elements", str(args.elements), "--chunks", *map(str, args.chunks), "--gemm", str(args.gemm)]
        argv += ["--threads", str(args.threads)]
        proc = _sh(*argv, timeout=args.timeout, env=env)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if not lines:
            raise SystemExit(f"worker failed ({proc.returncode}): {proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        out = json.loads(lines[-1][len("RESULT ") :])
    finally:
        _sh("down", "--name", args.name)
    print(
        f"{args.nodes} nodes x 1 rank, {args.rate}, {args.elements * 4 / 1e6:.1f} MB float32, "
        f"median of {args.repeat} (slowest rank), load {out['load']:.1f}, netmod {args.netmod}, env {args.env or '-'}, "
        f"gemm {args.gemm or '-'}, threads {args.threads or 'library default'}"
    )
    for label, t in out["results"].items():
        ts = sorted(out["times"][label])
        print(f"  {label:34s} {t * 1e3:8.2f} ms   (min {ts[0] * 1e3:.2f}, max {ts[-1] * 1e3:.2f})")
    print("  bitwise equal to MPI.Allreduce: " + ("yes" if not out["bad"] else f"NO for chunks {out['bad']}"))


if __name__ == "__main__":
    main()
