#!/usr/bin/env python
"""Checkpoint stall: what one interval checkpoint costs the training loop, synchronous vs
``checkpoint.async_save`` (issue 31), with the imagenet recipe's ResNet-50 on CPUs.

Run under mpiexec (every rank trains; gradients are allreduced as in the recipe)::

    mpiexec -n 2 python bench/bench_checkpoint.py            # ResNet-50, width 1 (~195 MB per rank)
    mpiexec -n 2 python bench/bench_checkpoint.py --small    # width 0.125, a few iterations (CI)

Each mode trains ``--iterations`` iterations on synthetic images (``--insize`` pixels: the
state's size does not depend on it, and ResNet-50 ends in a global average) with a checkpoint
every ``--interval`` iterations. The checkpoint extension's time per iteration is measured
on rank 0 (every rank waits for the slowest in the save's collectives); the stall per checkpoint
is its total over the interval checkpoints' iterations and those that follow (where an
asynchronous save is polled and committed), less the same number of iterations' cost without
a checkpoint, divided by the number of checkpoints. The final checkpoint (synchronous in both
modes) is not counted. Also reported: the median step time (update + allreduce) with and
without a background write in progress, which shows what the writer takes from training.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, REPO)

import mnframe  # noqa: E402,F401  (NumPy 2 compatibility before chainer)


class Timed:
    """The checkpoint extension, timed per call (the bench's view; the trainer sees the same extension)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, {}

    def __call__(self, trainer):
        start = time.perf_counter()
        self.inner(trainer)
        self.calls[trainer.updater.iteration] = time.perf_counter() - start

    def __getattr__(self, name):
        if name in ("inner", "calls"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def _run(mode, args, comm):
    import chainer
    import numpy as np
    from chainer import training

    from mnframe.checkpoint.attach import attach
    from mnframe.recipes.imagenet.models import ResNet50

    np.random.seed(0)
    model = ResNet50(n_class=1000, width=args.width)
    optimizer = mnframe.create_multi_node_optimizer(chainer.optimizers.MomentumSGD(lr=0.01), comm)
    optimizer.setup(model)
    n = args.batch * 2
    rng = np.random.RandomState(comm.rank)
    data = chainer.datasets.TupleDataset(
        rng.rand(n, 3, args.insize, args.insize).astype(np.float32), rng.randint(0, 1000, n).astype(np.int32)
    )
    it = chainer.iterators.SerialIterator(data, args.batch)
    run_dir = tempfile.mkdtemp(prefix=f"bench-ckpt-{mode}-", dir=args.dir) if comm.rank == 0 else None
    run_dir = comm.bcast_obj(run_dir)
    trainer = training.Trainer(
        training.updaters.StandardUpdater(it, optimizer), (args.iterations, "iteration"), out=run_dir
    )
    steps = {}

    class StepEnd(training.Extension):  # runs first: the end of update + allreduce
        priority = training.PRIORITY_WRITER + 1

        def __call__(self, trainer):
            steps[trainer.updater.iteration] = time.perf_counter()

    trainer.extend(StepEnd(), trigger=(1, "iteration"))
    ext = attach(trainer, {"interval": args.interval, "keep": 2, "async_save": mode == "async"}, run_dir, comm)
    timed = Timed(ext)
    trainer._extensions[ext.name].extension = timed
    ends = {}

    class IterEnd(training.Extension):  # runs last
        priority = -1

        def __call__(self, trainer):
            ends[trainer.updater.iteration] = time.perf_counter()

    trainer.extend(IterEnd(), trigger=(1, "iteration"))
    started = time.perf_counter()
    trainer.run()
    wall = time.perf_counter() - started
    state_bytes = sum(e.size for e in _manifest(ext).files.values()) // comm.size
    comm.mpi_comm.Barrier()
    if comm.rank == 0:
        shutil.rmtree(run_dir, ignore_errors=True)
    last = args.iterations
    saves = [i for i in range(args.interval, last, args.interval)]
    counted = [i for i in range(1, last)]  # not the final (synchronous) checkpoint
    quiet = [i for i in range(1, args.interval)]  # before the first checkpoint
    base = statistics.median(timed.calls[i] for i in quiet)
    stall = (sum(timed.calls[i] for i in counted) - base * len(counted)) / len(saves)
    step = {i: steps[i] - ends[i - 1] for i in range(2, last + 1) if i - 1 in ends}
    after_save = [step[i] for i in step if any(s < i <= s + args.interval // 2 for s in saves)]
    plain = [step[i] for i in step if i not in after_save and i - 1 not in saves]
    return {
        "mode": mode,
        "ranks": comm.size,
        "state_mb_per_rank": state_bytes / 1e6,
        "checkpoints": len(saves),
        "stall_s": stall,
        "save_iteration_s": statistics.median(timed.calls[i] for i in saves),
        "step_s_plain": statistics.median(plain) if plain else float("nan"),
        "step_s_after_save": statistics.median(after_save) if after_save else float("nan"),
        "wall_s": wall,
    }


def _manifest(ext):
    from mnframe.checkpoint.manifest import Manifest

    return Manifest.read(ext.store.path(ext.last_saved))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=14)
    parser.add_argument("--interval", type=int, default=4)
    parser.add_argument("--insize", type=int, default=64)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each mode, alternating")
    parser.add_argument("--dir", default=None, help="where the run directories go (default: the temp dir)")
    parser.add_argument("--small", action="store_true", help="width 0.125, 8 iterations (correctness, CI)")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.small:
        args.width, args.iterations, args.interval, args.insize = 0.125, 8, 3, 32
    comm = mnframe.create_communicator("naive")
    results = [_run(mode, args, comm) for _ in range(args.repeat) for mode in ("sync", "async")]
    if comm.rank != 0:
        return 0
    print(
        f"checkpoint stall, ResNet-50 width {args.width}, {comm.size} rank(s), {args.insize}px batch {args.batch}, "
        f"{args.iterations} iterations, a checkpoint every {args.interval}"
    )
    print(f"{'mode':6} {'MB/rank':>8} {'stall/ckpt s':>12} {'save-iter s':>11} {'step s':>7} {'step s (writing)':>16}")
    for r in results:
        print(
            f"{r['mode']:6} {r['state_mb_per_rank']:8.1f} {r['stall_s']:12.3f} {r['save_iteration_s']:11.3f} "
            f"{r['step_s_plain']:7.3f} {r['step_s_after_save']:16.3f}"
        )
    by_mode = {m: statistics.median(r["stall_s"] for r in results if r["mode"] == m) for m in ("sync", "async")}
    print(f"median stall per checkpoint: sync {by_mode['sync']:.3f} s, async {by_mode['async']:.3f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
