"""A trainer extension that measures a training run for the benchmarks.

Used by both sides of bench/bench_e2e.py and bench/bench_startup.py: the peer
scripts in this directory add it directly, the mnframe runner gets it as a
custom extension (``+extensions.probe._target_=bench.peer.probe.Probe``).

It records, on the rank it runs on:

* ``first_iteration_s``: wall time from ``$BENCH_T0`` (set by the launcher just
  before it starts ``mpiexec``) to the end of the first iteration;
* ``examples_per_s``: global examples per second over the iterations after the
  first ``warmup`` ones (per-rank batch size x ranks / mean step time);
* ``comm_fraction``: the share of those steps spent averaging gradients, timed
  around the communicator's ``multi_node_mean_grad``/``allreduce_grad`` (or,
  when the optimizer exposes no communicator, from mnframe's op log); with
  mnframe's ``overlap`` the buckets are averaged on another thread, so what
  counts is the main thread's wait for them after backward (``overlap:wait``
  in the op log): the communication that backward did not hide.

At the end of training it prints one line ``BENCH_RESULT {json}``.
"""

import functools
import json
import os
import time

import bench.peer.numpy2  # noqa: F401  (NumPy 2: before chainer)
import chainer
from chainer import training

_GRAD_METHODS = ("multi_node_mean_grad", "allreduce_grad")


class _CommTimer:
    """Total time spent inside the wrapped gradient-averaging calls (outermost calls only)."""

    def __init__(self):
        self.total = 0.0
        self._depth = 0

    def wrap(self, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            self._depth += 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.total += time.perf_counter() - start

        return timed


class _OpLogTimer:
    """Fallback: the union of the intervals of mnframe's logged communication ops."""

    def __init__(self, names=None):
        from mnframe.runtime import oplog

        self._records = []
        self._done = 0.0
        keep = self._records.append if names is None else (lambda r: r.name in names and self._records.append(r))
        oplog.get_log().listeners.append(keep)

    @property
    def total(self):
        finished = sorted((r.start, r.end) for r in self._records if r.end is not None)
        self._records[:] = [r for r in self._records if r.end is None]
        end_of_union = float("-inf")
        for start, end in finished:  # merge nested/overlapping ops
            if end <= end_of_union:
                continue
            self._done += end - max(start, end_of_union)
            end_of_union = end
        return self._done


class Probe(training.Extension):
    trigger = (1, "iteration")
    priority = training.PRIORITY_WRITER - 1  # after everything else of the iteration
    name = "bench_probe"

    def __init__(self, warmup=3, label=""):
        self.warmup, self.label = warmup, label
        self._t0 = float(os.environ.get("BENCH_T0", "nan"))
        self._first = None
        self._marks = []  # (time, comm_total) after each iteration
        self._timer = None
        self._batch = None
        self._size = 1
        self._optimizer = None

    def initialize(self, trainer):
        optimizer = trainer.updater.get_optimizer("main")
        self._optimizer = optimizer
        comm = getattr(optimizer, "communicator", None)
        if getattr(optimizer, "_overlap", None) is not None:  # mnframe's overlap: the unhidden wait
            self._size = comm.size
            self._timer = _OpLogTimer(names={"overlap:wait"})
        elif comm is not None:
            self._size = comm.size
            self._timer = _CommTimer()
            for name in _GRAD_METHODS:
                if hasattr(comm, name):
                    # an instance attribute shadows the method for this communicator only
                    setattr(comm, name, self._timer.wrap(getattr(comm, name)))
        else:
            try:
                from mpi4py import MPI

                self._size = MPI.COMM_WORLD.size
                self._timer = _OpLogTimer()
            except ImportError:  # pragma: no cover
                self._timer = None
        self._batch = trainer.updater.get_iterator("main").batch_size

    def __call__(self, _trainer):
        now = time.perf_counter()
        if self._first is None:
            self._first = time.time() - self._t0
        self._marks.append((now, self._timer.total if self._timer else 0.0))

    def result(self):
        marks = self._marks[self.warmup :]
        out = {
            "label": self.label,
            "ranks": self._size,
            "batch_per_rank": self._batch,
            "iterations": len(self._marks),
            "first_iteration_s": self._first,
            "examples_per_s": None,
            "step_s": None,
            "comm_fraction": None,
            "grad_bytes": _grad_bytes(self._optimizer),
            "autotune": _autotune_choice(self._optimizer),
            "blas_threads": _blas_threads(),
        }
        if len(marks) >= 2:
            steps = len(marks) - 1
            elapsed = marks[-1][0] - marks[0][0]
            out["step_s"] = elapsed / steps
            out["examples_per_s"] = self._batch * self._size * steps / elapsed
            out["comm_fraction"] = (marks[-1][1] - marks[0][1]) / elapsed if self._timer else None
        return out

    def finalize(self):
        print("BENCH_RESULT " + json.dumps(self.result()), flush=True)


def _grad_bytes(optimizer):
    """Bytes of the gradients one averaging moves (the model's parameters)."""
    target = getattr(optimizer, "target", None)
    return None if target is None else int(sum(p.array.nbytes for p in target.params() if p.array is not None))


def _autotune_choice(optimizer):
    """mnframe's optimizer.autotune: the setting it kept (None: no trial, or the peer)."""
    tuner = getattr(optimizer, "_tuner", None) if optimizer is not None and hasattr(optimizer, "_update") else None
    chosen = getattr(tuner, "chosen", None)
    return None if chosen is None else chosen.label


def _blas_threads():
    """The BLAS pool's thread count in this process (each side's own: the runner sizes it, the peer
    keeps the library's default), or None without threadpoolctl."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # pragma: no cover - a dependency of mnframe
        return None
    return max((p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"), default=None)


def add_to(trainer, comm, **kwargs):
    """Peer scripts: add the probe on rank 0 only (as a rank-0 report extension would be)."""
    if comm.rank == 0:
        trainer.extend(Probe(**kwargs))


chainer.disable_experimental_feature_warning = True


def parse_result(output):
    """The dict of the last ``BENCH_RESULT`` line in ``output`` (None when there is none)."""
    lines = [line for line in output.splitlines() if line.startswith("BENCH_RESULT ")]
    return json.loads(lines[-1][len("BENCH_RESULT ") :]) if lines else None
