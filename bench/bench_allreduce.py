"""Gradient averaging, side by side: every mnframe CPU communicator vs ChainerMN and raw MPI.

Run:  .venv/bin/mpiexec -n 2 .venv/bin/python bench/bench_allreduce.py [--small] [--repeat N]

Gradients: a ResNet-50-shaped set (chainer ResNet50Layers, ~102 MB float32),
rank r's gradient = (r + 1) * base, so the mean is base * (size + 1) / 2 on
every rank; every timed result is checked against that. Timed, in one run:
each mnframe CPU communicator's ``allreduce_grad`` twice, "resident" (the
gradients are the communicator's own buffer views from the previous call, the
steady state when nothing reallocates them) and "fresh" (new gradient arrays
before every call, as after a backward that allocates), the bundled
``chainermn`` ``naive`` communicator, one in-place ``MPI.Allreduce`` of the same
bytes, one ``numpy.copyto`` of the same bytes, and torch.distributed gloo when
torch is importable. A time is the max over ranks of one call; medians are
printed with ratios and the issue-8 verdicts for the default communicator.
``--small``: a tiny model and few repeats, correctness only (for CI).
"""
import argparse
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import mnframe  # noqa: E402,F401  (applies the NumPy compatibility shim before chainer)
import chainer  # noqa: E402
import chainer.links as L  # noqa: E402

from mnframe.communicators import registry  # noqa: E402

warnings.simplefilter("ignore", DeprecationWarning)
WORLD = MPI.COMM_WORLD


def build_model(small):
    if small:
        model = chainer.Sequential(L.Linear(7, 5), L.Linear(5, 3))
        model(np.zeros((1, 7), np.float32))
        return model
    return L.ResNet50Layers(pretrained_model=None)


def base_grads(model):
    rng = np.random.default_rng(0)  # the same on every rank
    return [rng.standard_normal(p.shape).astype(p.dtype) for _, p in sorted(model.namedparams())]


def set_grads(model, base, rank):
    for (_, p), b in zip(sorted(model.namedparams()), base):
        p.grad = b * np.asarray(rank + 1, b.dtype)


def check(model, base, label):
    want = (WORLD.size + 1) / 2
    bad = [n for (n, p), b in zip(sorted(model.namedparams()), base)
           if not np.allclose(p.grad, b * want, rtol=1e-5, atol=1e-6)]
    bad = WORLD.allgather(bad[:3])
    if any(bad):
        raise AssertionError(f"{label}: wrong averaged gradients, e.g. {[b for b in bad if b][0]}")


def timeit(fn, repeat, warmup, before=None):
    times = []
    for i in range(warmup + repeat):
        if before is not None:
            before()
        WORLD.Barrier()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        dt = WORLD.allreduce(dt, op=MPI.MAX)
        if i >= warmup:
            times.append(dt)
    return statistics.median(times)


def bench_mnframe(name, model, base, args):
    import mnframe as chainermn
    comm = chainermn.create_communicator(name)
    results = {}
    set_grads(model, base, WORLD.rank)
    results[f"mnframe {name} (resident)"] = timeit(lambda: comm.allreduce_grad(model), args.repeat, args.warmup)
    if name != "dummy":
        check(model, base, name)
    fresh = lambda: set_grads(model, base, WORLD.rank)  # noqa: E731
    results[f"mnframe {name} (fresh)"] = timeit(lambda: comm.allreduce_grad(model), args.repeat, args.warmup,
                                                before=fresh)
    if name != "dummy":
        check(model, base, name + " fresh")
    comm.finalize()
    return results


def bench_peer(model, base, args):
    import chainermn  # the bundled peer, benchmark only
    comm = chainermn.create_communicator("naive")
    set_grads(model, base, WORLD.rank)
    t = timeit(lambda: comm.allreduce_grad(model), 1, 0)  # one call: averages in place
    check(model, base, "chainermn naive")
    t = timeit(lambda: comm.allreduce_grad(model), args.repeat, args.warmup)
    return {"chainermn naive": t}


def bench_raw(nbytes, args):
    a = np.ones(nbytes // 4, np.float32)
    b = np.empty_like(a)
    out = {"MPI.Allreduce in place": timeit(lambda: WORLD.Allreduce(MPI.IN_PLACE, a), args.repeat, args.warmup)}
    out["numpy.copyto"] = timeit(lambda: np.copyto(b, a), args.repeat, args.warmup)
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return out
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=WORLD.rank, world_size=WORLD.size)
    t = torch.ones(nbytes // 4)
    out["torch gloo all_reduce"] = timeit(lambda: dist.all_reduce(t), args.repeat, args.warmup)
    dist.destroy_process_group()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="tiny model, correctness only")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--names", default=",".join(registry.cpu_names()))
    args = parser.parse_args()
    if args.repeat is None:
        args.repeat = 3 if args.small else 15
    model = build_model(args.small)
    base = base_grads(model)
    nbytes = sum(b.nbytes for b in base)
    results = {}
    for name in args.names.split(","):
        results.update(bench_mnframe(name, model, base, args))
    results.update(bench_peer(model, base, args))
    results.update(bench_raw(nbytes, args))
    if WORLD.rank == 0:
        report(results, nbytes, args)


def report(results, nbytes, args):
    default = registry.default_name()
    print(f"allreduce_grad of {nbytes / 1e6:.1f} MB on {WORLD.size} ranks, median of {args.repeat} "
          f"(default communicator: {default})")
    peer = results["chainermn naive"]
    for label, t in results.items():
        print(f"  {label:38s} {t * 1e3:9.2f} ms   x{t / peer:5.2f} of chainermn naive")
    if args.small:
        print("correctness: PASS (small run; no timing verdicts)")
        return
    d = results[f"mnframe {default} (resident)"]
    d_fresh = results[f"mnframe {default} (fresh)"]
    targets = [
        ("<= 0.5 x chainermn naive", d, 0.5 * peer),
        ("<= 0.5 x MPI.Allreduce", d, 0.5 * results["MPI.Allreduce in place"]),
        ("<= 1.5 x numpy.copyto", d, 1.5 * results["numpy.copyto"]),
    ]
    for what, t, limit in targets:
        print(f"  {default} (resident) {what}: {t * 1e3:.2f} ms vs {limit * 1e3:.2f} ms -> "
              f"{'PASS' if t <= limit else 'FAIL'}")
    for what, t, limit in targets:
        print(f"  {default} (fresh)    {what}: {d_fresh * 1e3:.2f} ms vs {limit * 1e3:.2f} ms -> "
              f"{'PASS' if d_fresh <= limit else 'FAIL'}")
    slower = [k for k, t in results.items() if k.startswith("mnframe") and "dummy" not in k and t > peer]
    print(f"  every mnframe communicator no slower than chainermn naive: {'PASS' if not slower else 'FAIL ' + str(slower)}")


if __name__ == "__main__":
    main()
