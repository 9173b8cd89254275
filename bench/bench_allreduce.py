"""Gradient averaging, side by side: every mnframe CPU communicator vs ChainerMN and raw MPI.

Run:  .venv/bin/mpiexec -n 2 .venv/bin/python bench/bench_allreduce.py [--small] [--repeat N]

Gradients: a ResNet-50-shaped set (chainer ResNet50Layers, ~102 MB float32),
rank r's gradient = (r + 1) * base, so the mean is base * (size + 1) / 2 on
every rank; every timed result is checked against that. Timed, in one run:
each mnframe CPU communicator's ``allreduce_grad`` twice (each on its own copy
of the model), "resident" (the
gradients are the communicator's own buffer views from the previous call, the
steady state when nothing reallocates them) and "fresh" (new gradient arrays
before every call, as after a backward that allocates; the previous arrays are
freed outside the timed region), the bundled
``chainermn`` ``naive`` communicator, one in-place ``MPI.Allreduce`` of the same
bytes, one ``numpy.copyto`` of the same bytes, and torch.distributed gloo when
torch is importable. The contenders run round-robin (one call each per round)
so that load from other processes hits all of them alike. A time is the max
over ranks of one call; medians are printed with ratios and the issue-8
verdicts for the default communicator.
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


def set_grads(model, base, rank, keep=None):
    """Give every param a new gradient array (rank + 1) * base.

    ``keep``: a list that holds the new arrays until the next call, so that the
    previous ones are freed here, outside the timed region (a communicator that
    hands out views of its buffer drops the last reference to them; in training
    the backward's arrays are freed every iteration anyway).
    """
    fresh = [b * np.asarray(rank + 1, b.dtype) for b in base]
    if keep is not None:
        keep[:] = fresh
    for (_, p), g in zip(sorted(model.namedparams()), fresh):
        p.grad = g


def check(model, base, label):
    want = (WORLD.size + 1) / 2
    bad = [
        n
        for (n, p), b in zip(sorted(model.namedparams()), base)
        if not np.allclose(p.grad, b * want, rtol=1e-5, atol=1e-6)
    ]
    bad = WORLD.allgather(bad[:3])
    if any(bad):
        raise AssertionError(f"{label}: wrong averaged gradients, e.g. {[b for b in bad if b][0]}")


class Contender:
    """One timed operation: ``fn`` after an untimed ``before``, checked by ``check`` at the end."""

    def __init__(self, label, fn, before=None, check=None):
        self.label, self.fn, self.before, self.check = label, fn, before, check
        self.times = []


def run_round_robin(contenders, repeat, warmup):
    """Time every contender once per round, round after round, so that load changes on a
    shared machine hit all of them alike; returns {label: median seconds (max over ranks)}."""
    for i in range(warmup + repeat):
        for c in contenders:
            if c.before is not None:
                c.before()
            WORLD.Barrier()
            t0 = time.perf_counter()
            c.fn()
            dt = WORLD.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            if i >= warmup:
                c.times.append(dt)
    for c in contenders:
        if c.check is not None:
            c.check()
    return {c.label: statistics.median(c.times) for c in contenders}


def mnframe_contenders(name, model, base):
    """Two contenders per communicator, each on its own copy of the model."""
    import mnframe as chainermn

    out = []
    for mode in ("resident", "fresh"):
        comm = chainermn.create_communicator(name)
        m = model.copy(mode="copy")
        set_grads(m, base, WORLD.rank)
        fresh = (lambda m=m, keep=[]: set_grads(m, base, WORLD.rank, keep)) if mode == "fresh" else None
        checker = None if name == "dummy" else (lambda m=m, lbl=f"{name} {mode}": check(m, base, lbl))
        out.append(
            Contender(f"mnframe {name} ({mode})", lambda c=comm, m=m: c.allreduce_grad(m), before=fresh, check=checker)
        )
    return out


def peer_contender(model, base):
    import chainermn  # the bundled peer, benchmark only

    comm = chainermn.create_communicator("naive")
    m = model.copy(mode="copy")
    set_grads(m, base, WORLD.rank)
    comm.allreduce_grad(m)  # averaging is idempotent from here on: equal inputs on every rank
    check(m, base, "chainermn naive")
    return Contender("chainermn naive", lambda: comm.allreduce_grad(m), check=lambda: check(m, base, "peer"))


def raw_contenders(nbytes):
    a = np.ones(nbytes // 4, np.float32)
    b = np.empty_like(a)
    out = [
        Contender("MPI.Allreduce in place", lambda: WORLD.Allreduce(MPI.IN_PLACE, a)),
        Contender("numpy.copyto", lambda: np.copyto(b, a)),
    ]
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return out
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=WORLD.rank, world_size=WORLD.size)
    t = torch.ones(nbytes // 4)
    out.append(Contender("torch gloo all_reduce", lambda: dist.all_reduce(t)))
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
    contenders = []
    for name in args.names.split(","):
        contenders += mnframe_contenders(name, model, base)
    contenders.append(peer_contender(model, base))
    contenders += raw_contenders(nbytes)
    results = run_round_robin(contenders, args.repeat, args.warmup)
    if WORLD.rank == 0:
        report(results, nbytes, args)


def report(results, nbytes, args):
    default = registry.name_for_device("cpu")  # the bench averages NumPy arrays
    print(
        f"allreduce_grad of {nbytes / 1e6:.1f} MB on {WORLD.size} ranks, median of {args.repeat} "
        f"(default communicator: {default})"
    )
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
        print(
            f"  {default} (resident) {what}: {t * 1e3:.2f} ms vs {limit * 1e3:.2f} ms -> "
            f"{'PASS' if t <= limit else 'FAIL'}"
        )
    for what, _t, limit in targets:
        print(
            f"  {default} (fresh)    {what}: {d_fresh * 1e3:.2f} ms vs {limit * 1e3:.2f} ms -> "
            f"{'PASS' if d_fresh <= limit else 'FAIL'}"
        )
    slower = [k for k, t in results.items() if k.startswith("mnframe") and "dummy" not in k and t > peer]
    verdict = "PASS" if not slower else "FAIL " + str(slower)
    print(f"  every mnframe communicator no slower than chainermn naive: {verdict}")


if __name__ == "__main__":
    main()
