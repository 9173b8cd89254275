#!/usr/bin/env python
"""GPU benchmark (issue 6): allreduce_grad per GPU communicator, and imagenet training images/s.

Run (one rank per GPU; without mpiexec it runs as one rank):

    python bench/bench_gpu.py                          # one GPU
    mpiexec -n <gpus> python bench/bench_gpu.py        # several GPUs (and nodes)
    python bench/bench_gpu.py --small                  # tiny sizes: a quick check that everything runs

Rank r uses GPU ``intra_rank % getDeviceCount()`` (its rank within its node).

Part 1, ``allreduce``: the ResNet-50-shaped gradient set of
bench/bench_allreduce.py (chainer's ResNet50Layers, 162 arrays, 102.2 MB
float32) as parameters of a model on the GPU. Before every call each
parameter gets a new CuPy gradient array (rank + 1) * base, base being the same
random array on every rank, made outside the timed region ("fresh" gradients,
as after a backward pass); a call is ``comm.multi_node_mean_grad(model)``
followed by a device synchronize, its time the max over ranks. For every
communicator variant (``--communicators``; ``+fp16`` puts float16 on the wire,
``+batched_copy`` sets batched_copy=True) the table shows the median and
minimum time, the bus bandwidth 2 (n - 1) / n x wire bytes / median (nccl-tests'
"busbw"; "-" on one rank) and a correctness check against the exact mean
base * (size + 1) / 2 after the first and the last call (rtol 1e-5 for float32
on the wire, 1e-2 for float16). A variant whose creation or first call fails
on any rank is "n/a: <reason>" on every rank (decided together, so no rank is
left waiting in a collective) and the benchmark goes on.

Part 2, ``train``: one training iteration of the imagenet recipe (its
ResNet50 model, MomentumSGD lr 0.01 momentum 0.9 + weight decay 1e-4, a
synthetic batch from its dataset, ``--batch`` images per rank) through
``create_multi_node_optimizer`` with ``pure_nccl`` (``non_cuda_aware`` when
pure_nccl is n/a, e.g. two ranks on one GPU), then with ``dummy`` (no gradient
exchange; a plain optimizer when dummy is n/a): warm-up iterations, then
``--iterations`` timed ones; images/s per rank and in total, and the share of
an iteration that the gradient exchange costs.

Without CUDA (no CuPy, no device) it prints one line
``bench_gpu: skipped: no CUDA device (...)`` and exits 0. Exit status 1 when a
correctness check FAILs (n/a rows do not count), 2 when CUDA is there but
Chainer cannot use it.

``--cpu`` runs the same harness on NumPy arrays with a CPU stand-in for the
GPU (the GPU-only communicators then show n/a, the training part falls back to
two_dimensional): a check of the script itself on machines without a GPU,
e.g. ``mpiexec -n 2 python bench/bench_gpu.py --cpu --small``. Its figures are
not GPU figures.
"""

import argparse
import os
import socket
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import mnframe  # noqa: E402  (applies the NumPy compatibility shim before chainer)

# Nothing below imports CuPy, Chainer or mpi4py at module level: main() does,
# after it has checked that CUDA is there.

DEFAULT_VARIANTS = (
    "pure_nccl",
    "pure_nccl+batched_copy",
    "pure_nccl+fp16",
    "hierarchical",
    "two_dimensional",
    "single_node",
    "non_cuda_aware",
    "flat",
    "naive",
)
VARIANT_OPTIONS = {  # "+token" of a variant -> create_communicator keyword arguments
    "fp16": {"allreduce_grad_dtype": "float16"},
    "float16": {"allreduce_grad_dtype": "float16"},
    "fp32": {"allreduce_grad_dtype": "float32"},
    "float32": {"allreduce_grad_dtype": "float32"},
    "batched_copy": {"batched_copy": True},
}
ARCH_NAMES = ("resnet50", "alex", "nin", "googlenetbn")  # keys of mnframe.recipes.imagenet.models.ARCHS
TRAIN_COMMUNICATORS = ("pure_nccl", "non_cuda_aware")  # the first that works is used
CPU_TRAIN_COMMUNICATORS = TRAIN_COMMUNICATORS + ("two_dimensional",)  # --cpu
SKIP_PREFIX = "bench_gpu: skipped: no CUDA device"


# ---------------------------------------------------------------- pure helpers


def parse_variant(spec):
    """A variant spec -> ``(communicator name, create_communicator keyword arguments)``.

    ``"pure_nccl+fp16+batched_copy"`` -> ``("pure_nccl", {"allreduce_grad_dtype": "float16", "batched_copy": True})``.
    """
    name, *tokens = [s.strip() for s in spec.strip().split("+")]
    if not name:
        raise ValueError(f"communicator variant {spec!r}: no communicator name")
    kwargs = {}
    for token in tokens:
        if token not in VARIANT_OPTIONS:
            raise ValueError(
                f"communicator variant {spec!r}: unknown option {token!r} (known: {', '.join(sorted(VARIANT_OPTIONS))})"
            )
        kwargs.update(VARIANT_OPTIONS[token])
    return name, kwargs


def wire_itemsize(kwargs, itemsize=4):
    """Bytes per gradient element on the wire: the allreduce_grad_dtype's, else the parameters' ``itemsize``."""
    dtype = kwargs.get("allreduce_grad_dtype")
    if dtype is None:
        return itemsize
    return {"float16": 2, "float32": 4, "float64": 8}[str(dtype)]


def bus_bandwidth_gbps(nbytes, seconds, n):
    """Allreduce bus bandwidth in GB/s: 2 (n - 1) / n x bytes / time; None on one rank or without a time."""
    if n <= 1 or not seconds or seconds <= 0:
        return None
    return 2.0 * (n - 1) / n * nbytes / seconds / 1e9


def tolerance(kwargs):
    """(rtol, atol) for comparing averaged gradients, by the dtype on the wire."""
    if str(kwargs.get("allreduce_grad_dtype")) == "float16":
        return 1e-2, 1e-2
    return 1e-5, 1e-6


def short_reason(exc, limit=90):
    """One short line for an exception: ``Type: first line of the message`` (cut at ``limit``)."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines and lines[0].strip() else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_failure(reasons):
    """``(rank, reason, every)`` for the first rank whose reason is not None (one entry per rank;
    ``every``: all ranks failed), or None when none did."""
    failed = [(rank, reason) for rank, reason in enumerate(reasons) if reason is not None]
    if not failed:
        return None
    return failed[0][0], failed[0][1], len(failed) == len(reasons)


def na(failure):
    """The table text for a failure: ``n/a: reason``, plus ``(rank r)`` when not every rank failed."""
    rank, reason, every = failure
    return f"n/a: {reason}" + ("" if every else f" (rank {rank})")


def skip_line(problems):
    """The one line printed when some rank has no CUDA (``problems``: each rank's reason or None)."""
    bad = [r for r, p in enumerate(problems) if p is not None]
    rank, reason, _ = first_failure(problems)
    where = "" if len(bad) == len(problems) else f" on rank(s) {', '.join(map(str, bad))}"
    return f"{SKIP_PREFIX}{where} ({reason})"


def comm_share(seconds_with, seconds_without):
    """Share of an iteration spent exchanging gradients: 1 - t(no exchange) / t(with); None if unknown."""
    if not seconds_with or seconds_without is None or seconds_with <= 0:
        return None
    return 1.0 - seconds_without / seconds_with


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def format_table(head, rows):
    """A Markdown table (as bench_e2e.py prints them): ``head`` and ``rows`` are sequences of cells."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def cuda_problem():
    """None when CuPy sees a CUDA device here, else a short reason (mnframe's one CUDA probe)."""
    from mnframe import cuda_env

    info = cuda_env.probe()
    return None if info.usable else (info.problem or "no device visible to CuPy")


# ---------------------------------------------------------------- GPU side


class Gpu:
    """The rank's GPU: index, name, ``xp`` (cupy), ``device`` (Chainer's) and ``sync()`` (wait for all its work)."""

    def __init__(self, index):
        import chainer
        import cupy

        self.xp = cupy
        self.index = index
        self.cuda_device = cupy.cuda.Device(index)
        self.cuda_device.use()
        self.device = chainer.get_device(f"@cupy:{index}")
        self.device.use()
        try:
            name = cupy.cuda.runtime.getDeviceProperties(index)["name"]
            self.name = name.decode() if isinstance(name, bytes) else str(name)
        except Exception:
            self.name = "?"
        try:  # tells whether two ranks share a GPU also when each sees only its own (CUDA_VISIBLE_DEVICES)
            bus = cupy.cuda.runtime.deviceGetPCIBusId(index)
            self.bus_id = bus.decode() if isinstance(bus, bytes) else str(bus)
        except Exception:
            self.bus_id = f"device {index}"

    def sync(self):
        self.cuda_device.synchronize()  # cudaDeviceSynchronize: every stream, NCCL's included

    def free_memory(self):
        self.xp.get_default_memory_pool().free_all_blocks()


class CpuStandIn:
    """``--cpu``: the same interface on NumPy, to check the harness itself where no GPU is (not a GPU figure)."""

    def __init__(self):
        import chainer
        import numpy

        self.xp = numpy
        self.index, self.name, self.bus_id = "-", "CPU stand-in", "-"
        self.device = chainer.get_device("@numpy")

    def sync(self):
        pass

    def free_memory(self):
        pass


def versions():
    import cupy

    parts = [f"CuPy {cupy.__version__}"]
    try:
        v = cupy.cuda.runtime.runtimeGetVersion()
        parts.append(f"CUDA runtime {v // 1000}.{v % 1000 // 10}")
    except Exception:
        pass
    try:
        from cupy.cuda import nccl

        v = nccl.get_version()
        parts.append(f"NCCL {v // 10000}.{v // 100 % 100}.{v % 100}" if v >= 10000 else f"NCCL {v}")
    except Exception:
        parts.append("NCCL not available")
    return ", ".join(parts)


def agree(world, error):
    """Collective: ``first_failure`` of every rank's ``error`` (None: no rank failed), the same on every rank."""
    return first_failure(world.allgather(error))


def set_fresh_grads(params, base, rank, keep):
    """Give every parameter a new gradient (rank + 1) * base; ``keep`` holds them until the next call,
    so the previous arrays are released here, not in the timed call."""
    fresh = [b * b.dtype.type(rank + 1) for b in base]
    keep[:] = fresh
    for (_, p), g in zip(params, fresh):
        p.grad = g


def wrong_grads(xp, params, base, want, rtol, atol):
    """Names (at most 3) of parameters whose gradient is not ``base * want`` within the tolerance."""
    bad = []
    for (name, p), b in zip(params, base):
        if p.grad is None or not bool(xp.allclose(p.grad, b * b.dtype.type(want), rtol=rtol, atol=atol)):
            bad.append(name)
            if len(bad) == 3:
                break
    return bad


def check_all(world, xp, params, base, kwargs):
    """Collective: None when every rank holds the exact mean, else a short description."""
    rtol, atol = tolerance(kwargs)
    bad = wrong_grads(xp, params, base, (world.size + 1) / 2, rtol, atol)
    failure = first_failure([b or None for b in world.allgather(bad)])
    if failure is None:
        return None
    rank, names, _ = failure
    return f"rank {rank}: {', '.join(names)}"


def _allreduce_header(world, gpu, small, n_arrays, nbytes, repeat, warmup):
    """Rank 0 says what part 1 measures (and why one rank checks nothing)."""
    if world.rank != 0:
        return
    print(
        f"\nallreduce_grad (multi_node_mean_grad) of {'a tiny' if small else 'ResNet-50-shaped'} gradient "
        f"set: {n_arrays} arrays, {nbytes / 1e6:.1f} MB float32, fresh {gpu.xp.__name__} gradient arrays "
        f"before every call; {world.size} rank(s); median and min of {repeat} after {warmup} warm-up "
        f"call(s); time = max over ranks, device synchronized",
        flush=True,
    )
    if world.size == 1:
        print(
            "note: on one rank multi_node_mean_grad has nothing to exchange (it returns after its "
            "checks), so nothing is checked; run one rank per GPU with mpiexec, or several ranks "
            "on one GPU with MNFRAME_FAKE_NODE_SIZE=1 (hierarchical, two_dimensional: NCCL in each "
            "one-rank node, MPI between them)",
            flush=True,
        )


def _time_mean_grad(world, gpu, comm, model, grads, warmup, repeat):
    """(the ``repeat`` timed calls' seconds, max over ranks; this rank's error or None); ``grads`` is
    ``(params, base, keep)`` for ``set_fresh_grads``."""
    from mpi4py import MPI

    params, base, keep = grads
    times = []
    try:
        for i in range(warmup + repeat):
            set_fresh_grads(params, base, world.rank, keep)
            gpu.sync()
            world.Barrier()
            t0 = time.perf_counter()
            comm.multi_node_mean_grad(model)
            gpu.sync()
            dt = world.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            if i >= warmup:
                times.append(dt)
    except Exception as e:
        return times, short_reason(e)
    return times, None


def bench_allreduce(world, gpu, variants, small, repeat, warmup):
    """Part 1: time multi_node_mean_grad per communicator variant; returns (rows, any FAIL)."""
    from bench.bench_allreduce import base_grads, build_model

    model = build_model(small)
    base = [gpu.xp.asarray(b) for b in base_grads(model)]  # same values on every rank (seeded)
    model.to_device(gpu.device)
    params = sorted(model.namedparams())
    nbytes = sum(int(b.nbytes) for b in base)
    _allreduce_header(world, gpu, small, len(params), nbytes, repeat, warmup)
    rows, failed = [], False
    keep = []
    for spec in variants:
        name, kwargs = parse_variant(spec)
        wire_bytes = nbytes // 4 * wire_itemsize(kwargs)
        wire = str(kwargs.get("allreduce_grad_dtype") or "float32")
        comm, error = None, None
        try:  # creation is collective: every rank tries, then all agree
            comm = mnframe.create_communicator(name, **kwargs)
        except Exception as e:
            error = short_reason(e)
        failure = agree(world, error)
        if failure is not None:  # not created everywhere: drop it (finalize is collective)
            rows.append([spec, wire, "-", "-", "-", "-", na(failure)])
            continue
        error = None
        try:  # the first call (a warm-up), also the correctness check's input
            set_fresh_grads(params, base, world.rank, keep)
            gpu.sync()
            comm.multi_node_mean_grad(model)
            gpu.sync()
        except Exception as e:
            error = short_reason(e)
        failure = agree(world, error)
        if failure is not None:  # created on every rank: finalize on every rank
            _finalize(comm)
            rows.append([spec, wire, "-", "-", "-", "-", na(failure)])
            continue
        check_first = None if name == "dummy" else check_all(world, gpu.xp, params, base, kwargs)
        times, error = _time_mean_grad(world, gpu, comm, model, (params, base, keep), warmup, repeat)
        failure = agree(world, error)
        check_last = None if name == "dummy" or failure else check_all(world, gpu.xp, params, base, kwargs)
        _finalize(comm)
        if failure is not None:
            rows.append([spec, wire, "-", "-", "-", "-", na(failure)])
            continue
        median = statistics.median(times)
        bad = check_first or check_last
        if name == "dummy" or world.size == 1:  # one rank: the mean is the gradient itself, nothing to check
            verdict = "-"
            note = "no exchange: not checked" if name == "dummy" else "one rank: nothing exchanged, not checked"
        else:
            verdict = "FAIL" if bad else "PASS"
            note = f"wrong mean: {bad}" if bad else ""
        failed = failed or bool(bad)
        rows.append(
            [
                spec,
                wire,
                fmt(median * 1e3, ".2f"),
                fmt(min(times) * 1e3, ".2f"),
                fmt(bus_bandwidth_gbps(wire_bytes, median, world.size), ".1f"),
                verdict,
                note,
            ]
        )
    for _, p in params:
        p.grad = None
    keep.clear()
    del model, base
    gpu.free_memory()
    return rows, failed


def _finalize(comm):
    try:
        comm.finalize()
    except Exception:
        pass


def synthetic_batch(gpu, batch, insize, n_class):
    """``batch`` images (3, insize, insize) and labels from the imagenet recipe's synthetic dataset, on the GPU."""
    import chainer

    from mnframe.recipes.imagenet.data import get_datasets

    train, _ = get_datasets(synthetic=True, n_synthetic=batch, insize=insize, n_class=n_class)
    x, t = chainer.dataset.concat_examples([train[i] for i in range(batch)])
    return gpu.device.send(x), gpu.device.send(t)


def run_training(world, gpu, comm_name, arch, width, n_class, x, t, warmup, iterations):
    """Build, warm up and time ``iterations`` training steps over ``comm_name`` (None: a plain
    optimizer, no multi-node wrapper). Collective. Returns (seconds per iteration or None, failure or None)."""
    import chainer
    from mpi4py import MPI

    from mnframe.recipes.imagenet.models import ARCHS

    comm, model, optimizer, error = None, None, None, None
    try:
        if comm_name is not None:
            comm = mnframe.create_communicator(comm_name)
    except Exception as e:
        error = short_reason(e)
    failure = agree(world, error)
    if failure is not None:
        return None, failure
    try:
        model = ARCHS[arch](n_class=n_class, width=width)
        model.to_device(gpu.device)
        optimizer = chainer.optimizers.MomentumSGD(lr=0.01, momentum=0.9)
        if comm is not None:
            optimizer = mnframe.create_multi_node_optimizer(optimizer, comm)
        optimizer.setup(model)
        optimizer.add_hook(chainer.optimizer_hooks.WeightDecay(1e-4))
        for _ in range(warmup):  # the first step materialises lazy layers and only broadcasts them
            optimizer.update(model, x, t)
        gpu.sync()
    except Exception as e:
        error = short_reason(e)
    failure = agree(world, error)
    seconds = None
    if failure is None:
        try:
            world.Barrier()
            t0 = time.perf_counter()
            for _ in range(iterations):
                optimizer.update(model, x, t)
            gpu.sync()
            seconds = world.allreduce(time.perf_counter() - t0, op=MPI.MAX) / iterations
        except Exception as e:
            error = short_reason(e)
        failure = agree(world, error)
    if comm is not None:
        _finalize(comm)
    del model, optimizer
    gpu.free_memory()
    return (None if failure else seconds), failure


def bench_train(world, gpu, args):
    """Part 2: imagenet training iterations with and without gradient exchange; returns (rows, exchange share)."""
    from mnframe.recipes.imagenet.models import ARCHS

    cls = ARCHS[args.arch]
    insize = args.insize or cls.insize
    x, t = synthetic_batch(gpu, args.batch, insize, args.n_class)
    if world.rank == 0:
        print(
            f"\nimagenet training iteration: {cls.__name__} (width {args.width}, {args.n_class} classes), "
            f"{args.batch} synthetic {insize}x{insize} images per rank, MomentumSGD + weight decay, "
            f"create_multi_node_optimizer; {args.train_warmup} warm-up + {args.iterations} timed "
            f"iterations; {world.size} rank(s); time = max over ranks",
            flush=True,
        )
    rows, skipped = [], []
    exchange = None
    chain = CPU_TRAIN_COMMUNICATORS if args.cpu else TRAIN_COMMUNICATORS
    for name in chain:
        seconds, failure = run_training(
            world, gpu, name, args.arch, args.width, args.n_class, x, t, args.train_warmup, args.iterations
        )
        if failure is None:
            note = "; ".join(f"{n} {na(f)}" for n, f in skipped)
            exchange = (name, seconds, note)
            break
        skipped.append((name, failure))
    if exchange is None:
        rows.append(["/".join(chain), "-", "-", "-", "; ".join(f"{n} {na(f)}" for n, f in skipped)])
        seconds_with = None
    else:
        name, seconds_with, note = exchange
        rows.append([name] + _rates(seconds_with, args.batch, world.size) + [note])
    seconds_without, failure = run_training(
        world, gpu, "dummy", args.arch, args.width, args.n_class, x, t, args.train_warmup, args.iterations
    )
    if failure is None:
        rows.append(["dummy (no exchange)"] + _rates(seconds_without, args.batch, world.size) + [""])
    else:
        seconds_without, _ = run_training(
            world, gpu, None, args.arch, args.width, args.n_class, x, t, args.train_warmup, args.iterations
        )
        rows.append(
            ["none (plain MomentumSGD)"] + _rates(seconds_without, args.batch, world.size) + [f"dummy {na(failure)}"]
        )
    share = comm_share(seconds_with, seconds_without)
    return rows, share


def _rates(seconds, batch, size):
    if seconds is None:
        return ["-", "-", "-"]
    per_rank = batch / seconds
    return [fmt(seconds * 1e3, ".1f"), fmt(per_rank, ".1f"), fmt(per_rank * size, ".1f")]


def describe_ranks(world, gpu, n_devices):
    """Rank 0 prints where every rank runs; warns when ranks share a GPU."""
    where = world.gather((socket.gethostname(), gpu.index, gpu.name, n_devices, gpu.bus_id), root=0)
    if world.rank != 0:
        return
    if n_devices is None:
        print(f"bench_gpu --cpu: {world.size} rank(s); NumPy arrays on the CPU, a check of the script: NOT GPU figures")
        return
    print(f"bench_gpu: {world.size} rank(s); {versions()}")
    for r, (host, index, name, count, bus) in enumerate(where):
        print(f"  rank {r}: {host} GPU {index} of {count} visible ({name}, PCI {bus})")
    seen = {}
    for r, (host, _, _, _, bus) in enumerate(where):
        seen.setdefault((host, bus), []).append(r)
    shared = [ranks for ranks in seen.values() if len(ranks) > 1]
    if shared:
        print(
            f"  note: ranks {shared} share a GPU; NCCL refuses two ranks of one NCCL group on a GPU "
            f"(pure_nccl shows n/a; hierarchical/two_dimensional work with MNFRAME_FAKE_NODE_SIZE=1)"
        )
    sys.stdout.flush()


# ---------------------------------------------------------------- command line


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--small", action="store_true", help="tiny gradient set and a tiny network: checks that everything runs"
    )
    parser.add_argument("--parts", default="allreduce,train", help="comma list of: allreduce, train")
    parser.add_argument(
        "--communicators",
        default=",".join(DEFAULT_VARIANTS),
        help="comma list of communicator variants NAME[+fp16][+batched_copy] (default: %(default)s)",
    )
    parser.add_argument("--repeat", type=int, default=None, help="timed allreduce calls (default 20, 3 with --small)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed allreduce calls before them")
    parser.add_argument("--batch", type=int, default=None, help="images per rank (default 32, 4 with --small)")
    parser.add_argument(
        "--iterations", type=int, default=None, help="timed training iterations (default 20, 3 with --small)"
    )
    parser.add_argument(
        "--train-warmup",
        type=int,
        default=3,
        help="untimed training iterations first (at least 2: the first only broadcasts)",
    )
    parser.add_argument("--arch", choices=ARCH_NAMES, default="resnet50", help="imagenet recipe model")
    parser.add_argument("--width", type=float, default=None, help="channel multiplier (default 1, 0.125 with --small)")
    parser.add_argument("--insize", type=int, default=None, help="image size (default: the model's, 64 with --small)")
    parser.add_argument("--n-class", type=int, default=1000)
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="check the script itself without a GPU: NumPy gradients, CPU stand-in device "
        "(GPU-only communicators show n/a; the figures are not GPU figures)",
    )
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - {"allreduce", "train"})
    if unknown:
        parser.error(f"--parts: unknown {unknown} (known: allreduce, train)")
    args.parts = parts
    args.variants = [v.strip() for v in args.communicators.split(",") if v.strip()]
    from mnframe.communicators import registry  # import-light: no MPI, no CuPy

    for spec in args.variants:
        try:
            name, _ = parse_variant(spec)
        except ValueError as e:
            parser.error(str(e))
        if name not in registry.COMMUNICATORS:
            parser.error(f"--communicators: unknown communicator {name!r} (known: {', '.join(registry.COMMUNICATORS)})")
    small = args.small
    args.repeat = args.repeat if args.repeat is not None else (3 if small else 20)
    args.batch = args.batch if args.batch is not None else (4 if small else 32)
    args.iterations = args.iterations if args.iterations is not None else (3 if small else 20)
    args.width = args.width if args.width is not None else (0.125 if small else 1.0)
    if args.insize is None and small:
        args.insize = 64
    if small:
        args.n_class = min(args.n_class, 10)
    return args


def main(argv=None):
    args = parse_args(argv)
    problem = None if args.cpu else cuda_problem()
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    problems = world.allgather(problem)  # every rank skips, or none does
    if any(p is not None for p in problems):
        if world.rank == 0:
            print(skip_line(problems), flush=True)
        return 0

    import warnings

    from mnframe.communicators import node_discovery

    warnings.simplefilter("ignore", DeprecationWarning)
    topo = node_discovery.discover(world)  # the intra_rank every communicator will report
    intra_rank = topo.intra_rank
    topo.free()
    gpu, n_devices, error = None, None, None
    try:
        if args.cpu:
            gpu = CpuStandIn()
        else:
            import cupy

            n_devices = cupy.cuda.runtime.getDeviceCount()
            gpu = Gpu(intra_rank % n_devices)
    except Exception as e:  # e.g. Chainer cannot use this CuPy (chainer.backends.cuda.available is False)
        error = short_reason(e, limit=200)
    failure = agree(world, error)
    if failure is not None:
        if world.rank == 0:
            rank, reason, every = failure
            print(f"bench_gpu: cannot use the GPU: {reason}{'' if every else f' (rank {rank})'}", flush=True)
        return 2
    describe_ranks(world, gpu, n_devices)

    failed = False
    if "allreduce" in args.parts:
        rows, failed = bench_allreduce(world, gpu, args.variants, args.small, args.repeat, args.warmup)
        if world.rank == 0:
            print(format_table(("communicator", "wire", "median ms", "min ms", "bus GB/s", "check", "note"), rows))
            print("bus GB/s = 2 (n - 1) / n x wire bytes / median time (- on one rank)", flush=True)
    if "train" in args.parts:
        rows, share = bench_train(world, gpu, args)
        if world.rank == 0:
            print(
                format_table(("gradient exchange", "ms/iteration", "images/s per rank", "images/s total", "note"), rows)
            )
            print(
                f"gradient exchange share of an iteration: {fmt(None if share is None else 100 * share, '.1f')} %",
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
