"""Run across simulated nodes (tests/test_multinode_overlap.py): overlap=True gives bitwise the
parameters of averaging after backward, for two_dimensional and hierarchical (float32) and
two_dimensional with float16 on the wire, with small buckets (many per step). Prints "OVERLAP_CHECK OK" on rank 0
when every check passed on every rank."""

# ruff: noqa: I001 - mnframe first: it must be imported before chainer on NumPy 2
import socket
import sys

import mnframe as chainermn  # before chainer (NumPy 2)

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
from mpi4py import MPI

from mnframe.communicators import registry

world = MPI.COMM_WORLD


class Net(chainer.Chain):
    """Layers of several sizes (the largest above the pipelined exchange's chunk, so it is cut in
    several), a weight used twice, a parameter backward never reaches."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(64, 2048)
            self.l2 = L.Linear(2048, 1024)
            self.shared = L.Linear(1024, 256)
            self.out = L.Linear(256, 5)
            self.unused = L.Linear(3, 3)

    def forward(self, x, t):
        h = F.relu(self.l1(x))
        h = F.relu(self.l2(h))
        h = F.tanh(self.shared(h))
        h = F.tanh(self.shared(F.pad(h, ((0, 0), (0, 768)), "constant")))
        return F.softmax_cross_entropy(self.out(h), t)


def train(comm, overlap, steps=3, **kw):
    model = Net()
    rng = np.random.RandomState(0)
    for _, p in sorted(model.namedparams()):
        p.array[...] = rng.standard_normal(p.shape).astype(p.dtype) * 0.05
    opt = chainermn.create_multi_node_optimizer(chainer.optimizers.MomentumSGD(lr=0.1), comm, overlap=overlap, **kw)
    opt.setup(model)
    data = np.random.RandomState(10 + comm.rank)
    stats = {}
    for _ in range(steps):
        x = data.standard_normal((8, 64)).astype(np.float32)
        t = data.randint(0, 5, 8).astype(np.int32)
        opt.update(model, x, t)
        if overlap:
            stats = dict(opt._overlap.stats)
    opt.finalize()
    return model, stats


def check(name, **options):
    comm = chainermn.create_communicator(name, **options)
    plain, _ = train(comm, overlap=False)
    over, stats = train(comm, overlap=True, bucket_cap_mb=0.5)
    for (pname, a), (_, b) in zip(sorted(plain.namedparams()), sorted(over.namedparams())):
        assert a.array.tobytes() == b.array.tobytes(), f"{name} {options}: {pname} differs"
    assert stats["buckets"] >= 3 and stats["started_in_backward"] >= 1, stats
    digests = comm.allgather_obj(float(sum(np.abs(p.array).sum() for p in over.params())))
    assert len(set(digests)) == 1, f"{name} {options}: ranks differ: {digests}"
    inter = comm.inter_size
    comm.finalize()
    return inter


hosts = world.allgather(socket.gethostname())
# the default (pipelined exchange fed chunk by chunk) and hierarchical (the leaders' exchange);
# every CPU communicator's overlap is checked on fake nodes by tests/mpi/test_opt_overlap_nodes.py
names = [n for n in ("two_dimensional", "hierarchical") if n in registry.cpu_names()]
done = []
for name in names:
    inter = check(name)
    assert inter == len(set(hosts)), (inter, hosts)
    done.append(name)
check("two_dimensional", allreduce_grad_dtype="float16")
done.append("two_dimensional float16")
world.Barrier()
if world.rank == 0:
    print(f"OVERLAP_CHECK OK nodes={len(set(hosts))} size={world.size} {' '.join(done)}", flush=True)
sys.stdout.flush()
