"""Run across simulated nodes (tests/test_multinode.py, tests/test_multinode_scale.py): node detection
from real hostnames, every CPU communicator's multi_node_mean_grad against the exact mean, and
scatter_dataset. The gradients are small integers, so every partial sum is exact in float32 and,
where the world size is a power of two, so is the division: there the mean must be bitwise the
exact one (``exact=bitwise`` in the OK line), elsewhere within rtol 1e-6. The same with float16 on
the wire (the sums stay below 2048, exact in float16). Prints
"COMM_CHECK OK <names>" on rank 0 when every check passed on every rank."""

# ruff: noqa: I001 - mnframe first: it must be imported before chainer on NumPy 2
import socket
import sys

import mnframe as chainermn  # before chainer (NumPy 2)

import chainer
import chainer.links as L
import numpy as np
from mpi4py import MPI

from mnframe.communicators import registry

world = MPI.COMM_WORLD
rank, size = world.rank, world.size
hosts = world.allgather(socket.gethostname())
nodes = sorted(set(hosts), key=hosts.index)
node_of = [nodes.index(h) for h in hosts]
ranks_on_my_node = [r for r in range(size) if hosts[r] == hosts[rank]]
expect_intra = (ranks_on_my_node.index(rank), len(ranks_on_my_node))
expect_inter = (node_of[rank], len(nodes))


def model():
    m = chainer.Chain()
    with m.init_scope():
        m.a = L.Linear(300, 200)  # 60k weights: several chunks of the CPU strategies
        m.b = L.Linear(200, 3)
    return m


def fill(m, r):
    for i, (_, p) in enumerate(sorted(m.namedparams())):
        p.grad = ((np.arange(p.size).reshape(p.shape) % 13) * (r + 1) + i).astype(np.float32)


def exact(p, i):
    base = (np.arange(p.size).reshape(p.shape) % 13).astype(np.float64)
    return base * np.mean(np.arange(1, size + 1)) + i


BITWISE = size & (size - 1) == 0  # 1/size is exact in binary floating point
names = [n for n in registry.cpu_names() if n not in ("dummy", "single_node")]


def check_mean(comm, what, rtol):
    m = model()
    fill(m, rank)
    comm.multi_node_mean_grad(m)
    for i, (pname, p) in enumerate(sorted(m.namedparams())):
        if BITWISE:  # the gradients' sums (< 2048) are exact even in float16
            np.testing.assert_array_equal(p.grad, exact(p, i).astype(np.float32), err_msg=f"{what} {pname} {rank}")
        else:
            np.testing.assert_allclose(p.grad, exact(p, i), rtol=rtol, err_msg=f"{what} {pname} rank {rank}")


for name in names:
    comm = chainermn.create_communicator(name)
    got = (comm.intra_rank, comm.intra_size, comm.inter_rank, comm.inter_size)
    assert got == expect_intra + expect_inter, (name, rank, hosts, got)
    check_mean(comm, name, 1e-6)
    check_mean(chainermn.create_communicator(name, allreduce_grad_dtype="float16"), f"{name} float16 wire", 1e-3)
    m2 = model()
    m2.a.W.array[...] = rank
    comm.bcast_data(m2)
    assert (m2.a.W.array == 0).all(), name

# scatter_dataset: shards disjoint, their union the dataset, balanced, across nodes
comm = chainermn.create_communicator("naive")
data = np.arange(101) * 3 if rank == 0 else None
shard = chainermn.scatter_dataset(data, comm, shuffle=True, seed=5, force_equal_length=False)
mine = [int(shard[i]) for i in range(len(shard))]
every = world.allgather(mine)
flat = sorted(x for part in every for x in part)
assert flat == list(np.arange(101) * 3), flat[:10]
assert max(map(len, every)) - min(map(len, every)) <= 1
world.Barrier()
if rank == 0:
    exactness = "bitwise" if BITWISE else "rtol 1e-6"
    print(f"COMM_CHECK OK nodes={len(nodes)} size={size} hosts={hosts} names={names} exact={exactness}", flush=True)
sys.exit(0)
