"""Averaging overlapped with backward: each bucket of gradients is averaged as soon as it is final.

As PyTorch DDP's reducer and Horovod's per-parameter hooks do: the parameters
are cut into buckets in the order backward finishes their gradients (the last
layers first), and a communication thread averages bucket 0, 1, 2, ... while
the main thread is still computing the gradients of the earlier layers.
``update()`` then waits for the last bucket and steps. Every step uses this
step's average, unlike double buffering.

* Bucket sizes: the first holds at most 1 MiB (DDP's first-bucket rule), the
  others at most ``bucket_cap_mb``. DDP's fixed 25 MiB makes a smaller model
  one bucket, averaged after backward with nothing overlapped, so without a
  ``bucket_cap_mb`` the cap is a quarter of the model's gradients, between
  1 and 25 MiB (``bucket_cap_bytes``).
* When is a gradient final? ``early_backward`` (mnframe's driver of Chainer's
  backward) hands each parameter over when the last function node that adds to
  its gradient has run.
* Bucket order: recorded from the backward of the first update (the
  broadcast-only one), taken from rank 0 (``bcast_obj``) so every rank forms
  the same buckets, and recorded again whenever the set of parameters changes.
  An update in a layout without an order yet averages after backward.
* How a bucket is averaged: by ``multi_node_mean_grad`` of a communicator of
  the same class and configuration on a duplicate of the MPI communicator
  (``communicator.split``), called on the bucket's parameters only, so every
  communicator's own strategy (shared memory, NCCL, float16 on the wire, ...)
  averages the buckets, and its messages never meet the main thread's. The
  strategies compute each element by the same operations whatever the other
  elements of the buffer are, so the result is bitwise the average after
  backward (tests/mpi/test_opt_overlap.py, 1-3 ranks, every CPU communicator).
* The thread's communication appears in the op log's history; the op in flight
  that the collective deadlines watch is the main thread's ``overlap:wait``.
* The thread calls MPI while the main thread may too (model-parallel links):
  it needs ``MPI_THREAD_MULTIPLE`` (mpi4py asks for it); otherwise, and for
  ``update()`` without ``lossfun`` (the caller ran backward itself), the buckets
  are averaged after backward, with the same result.

GPU gradients go the same way (the thread enters the gradients' device). Run on
a GPU (one H200, 2026-11-27): bitwise the average after backward with the
host-staged communicators and fake-node NCCL (tests/gpu/mpi/test_gpu_overlap.py);
an NCCL group over several GPUs has not run.
"""

import concurrent.futures

import chainer
from mpi4py import MPI

from mnframe.optimizers import early_backward
from mnframe.runtime import oplog

MIB = 1 << 20
DEFAULT_BUCKET_CAP_MB = 25.0  # PyTorch DDP's default, and the most the sized default gives
# PyTorch DDP's kDefaultFirstBucketBytes: the first bucket (the last layers' gradients) is kept
# small so that averaging starts early in backward instead of waiting for 25 MiB of gradients.
FIRST_BUCKET_CAP_MB = 1.0
# Without a bucket_cap_mb, the cap is the model's gradient bytes over this (between the first
# bucket's cap and DDP's 25 MiB): a model under 25 MiB would otherwise be one bucket, averaged
# only after backward, with nothing overlapped (BENCHMARKS.md 6e measured NIN's 6.5 MiB).
SIZED_BUCKETS = 4


def bucket_cap_bytes(bucket_cap_mb, total_bytes, sized_buckets=SIZED_BUCKETS):
    """The largest bucket: ``bucket_cap_mb`` MiB, or sized to the model (``total_bytes`` over
    ``sized_buckets``) when None."""
    if bucket_cap_mb is not None:
        return max(1, int(bucket_cap_mb * MIB))
    return int(min(DEFAULT_BUCKET_CAP_MB * MIB, max(FIRST_BUCKET_CAP_MB * MIB, total_bytes / sized_buckets)))


class _Params:
    """A stand-in link over some parameters: what ``multi_node_mean_grad`` reads (``namedparams``)."""

    def __init__(self, named):
        self._named = named

    def namedparams(self):
        return iter(self._named)


def plan_buckets(order, sizes, cap_bytes, first_cap_bytes=None):
    """Cut ``order`` (parameter names, in the order their gradients become final) into buckets of at
    most ``cap_bytes``, the first one of at most ``first_cap_bytes`` (default: ``cap_bytes``); a
    larger single parameter gets a bucket of its own."""
    buckets, current, nbytes = [], [], 0
    first_cap = cap_bytes if first_cap_bytes is None else min(first_cap_bytes, cap_bytes)
    for name in order:
        size = sizes[name]
        if current and nbytes + size > (cap_bytes if buckets else first_cap):
            buckets.append(tuple(current))
            current, nbytes = [], 0
        current.append(name)
        nbytes += size
    if current:
        buckets.append(tuple(current))
    return tuple(buckets)


class OverlapAverager:
    """Averages a model's gradients bucket by bucket during ``backward`` (see the module doc)."""

    def __init__(self, communicator, zero_fill, bucket_cap_mb=None, sized_buckets=SIZED_BUCKETS):
        self.communicator = communicator
        self.zero_fill = zero_fill
        self.bucket_cap_mb = bucket_cap_mb  # None: sized to the model (bucket_cap_bytes)
        self.sized_buckets = sized_buckets  # without bucket_cap_mb: the model's bytes over this
        self._plans = {}  # layout -> buckets (tuples of names)
        self._order = None  # names in the order of the last recorded backward, until the ranks agree on it
        self._comm = None  # the bucket communicator (a split of ``communicator``), made on first use
        self._executor = None
        self.threaded = MPI.Query_thread() >= MPI.THREAD_MULTIPLE
        self.stats = {"buckets": 0, "started_in_backward": 0}  # of the last update (tests, benchmarks)

    # ---- the update
    def backward(self, loss, loss_scale, target, layout):
        """Run ``loss``'s backward; with a plan for ``layout`` (the settled parameter layout, None in an
        update that will not average) also average the gradients, bucket by bucket. Returns whether it
        averaged; otherwise it recorded the order in which the gradients became final."""
        plan = None if layout is None else self._plan(target, layout)
        if plan is None:
            finals = []
            early_backward.backward(loss, loss_scale, finals.append)
            self._record(target, finals)
            return False
        run = _Run(self, plan, dict(target.namedparams()))
        try:
            early_backward.backward(loss, loss_scale, run.final if self.threaded else None)
            run.backward_done()
        finally:
            run.wait()
        return True

    # ---- plans
    def _record(self, target, finals):
        names = {id(p): n for n, p in target.namedparams()}
        self._order = [names[id(v)] for v in finals if id(v) in names]

    def _plan(self, target, layout):
        """The buckets for ``layout``; made (collectively) from the recorded order when there is one."""
        plan = self._plans.get(layout)
        if plan is not None or self._order is None:
            return plan
        order, self._order = self._order, None
        order = self.communicator.bcast_obj(order, root=0)  # every rank: rank 0's buckets
        sizes = {n: p.array.nbytes for n, p in target.namedparams() if p.array is not None}
        order = [n for n in dict.fromkeys(order) if n in sizes]
        listed = set(order)
        order += [n for n in sorted(sizes) if n not in listed]  # never final early: last
        if len(self._plans) >= 8:
            self._plans.clear()
        plan = self._plans[layout] = plan_buckets(
            order,
            sizes,
            bucket_cap_bytes(self.bucket_cap_mb, sum(sizes.values()), self.sized_buckets),
            int(FIRST_BUCKET_CAP_MB * MIB),
        )
        self._bucket_comm(len(plan))
        return plan

    def _bucket_comm(self, n_buckets):
        if self._comm is None:
            self._comm = self.communicator.split(0, self.communicator.rank)
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mnframe-overlap")
        keep = getattr(self._comm, "keep_layouts", None)
        if keep is not None:
            keep(n_buckets + 2)

    def average_bucket(self, named, device):
        """Average one bucket's gradients (on the communication thread, or inline)."""
        with chainer.using_device(device):
            self._comm.multi_node_mean_grad(_Params(named), self.zero_fill)

    def close(self):
        """Stop the thread and free the bucket communicator (collective: at finalize, on every rank)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self._comm is not None:
            self._comm.finalize()
            self._comm = None
        self._plans.clear()


class _Run:
    """One update's buckets: which are final, which were handed to the thread, their futures."""

    def __init__(self, averager, plan, params):
        self.averager = averager
        self.plan = plan
        self.params = params  # name -> Parameter
        self.bucket_of = {}
        for b, names in enumerate(plan):
            for n in names:
                self.bucket_of[id(params[n])] = b
        self.missing = [len(names) for names in plan]
        self.next = 0  # the next bucket to hand over (in plan order: every rank in the same order)
        self.futures = []
        self.in_backward = True
        averager.stats = {"buckets": len(plan), "started_in_backward": 0}

    def final(self, var):
        b = self.bucket_of.get(id(var))
        if b is None:
            return
        self.missing[b] -= 1
        self._submit_ready()

    def backward_done(self):
        self.in_backward = False
        self.missing = [0] * len(self.plan)
        self._submit_ready()

    def _submit_ready(self):
        av = self.averager
        while self.next < len(self.plan) and self.missing[self.next] == 0:
            names = self.plan[self.next]
            named = [(n, self.params[n]) for n in names]
            device = named[0][1].device
            if self.in_backward:
                av.stats["started_in_backward"] += 1
            if av.threaded:
                self.futures.append(av._executor.submit(av.average_bucket, named, device))
            else:
                av.average_bucket(named, device)
            self.next += 1

    def wait(self):
        error = None
        with oplog.op("overlap:wait", nbytes=len(self.futures)):  # the collective deadline watches this wait
            for f in self.futures:
                try:
                    f.result()
                except BaseException as e:  # wait for every bucket before raising: none is left running
                    error = error or e
        self.futures = []
        if error is not None:
            raise error
