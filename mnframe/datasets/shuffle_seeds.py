"""The shuffle seeds of this process's ``scatter_dataset`` calls, so a resume gets the same shards.

ChainerMN's ``scatter_dataset(train, comm, shuffle=True)`` without a seed
permutes with fresh OS entropy: a restarted job gives every rank different
examples, and a resume from a checkpoint is no longer exact. mnframe draws the
seed on the root (same distribution as ChainerMN), sends it with the shards and
records every shuffled scatter here, in call order. The checkpoint saves these
seeds in each rank's file (mnframe.checkpoint.rng); a resume with the same
world size compares them with this run's and, where a seed differs, restores
the checkpointed shards in place: the ranks exchange the examples the old
permutation gave them (one alltoall), so iterators and any wrappers around
the shard see the old shard. Same root data, same size: exact resume.
"""

import secrets
import sys
import weakref

import numpy as np

from mnframe.runtime import oplog
from mnframe.runtime.mpi_comm import mpi_comm_of

_scattered = []  # _Scatter per shuffled scatter_dataset call of this process, in call order
_loaded = {"seeds": None}


class _Scatter:
    def __init__(self, n, ranges, seed, layout, shard):
        self.n, self.ranges, self.seed, self.layout = n, [tuple(r) for r in ranges], seed, layout
        try:
            self._shard = weakref.ref(shard)
        except TypeError:  # a list: kept alive (a shard lives as long as its iterator anyway)
            self._shard = lambda: shard

    def shard(self):
        return self._shard()


def draw_seed():
    """A fresh seed for ``numpy.random.RandomState`` (what ChainerMN's seed=None amounts to)."""
    return secrets.randbits(32)


def record(n, ranges, seed, layout, shard):
    """Remember one shuffled scatter (every rank, same call order, same broadcast values)."""
    _scattered.append(_Scatter(n, ranges, seed if isinstance(seed, (int, np.integer)) else None, layout, shard))


def saved_state():
    """[[n, seed], ...] of the shuffled scatters so far (seed -1: not an int seed, not restorable)."""
    rows = [[s.n, -1 if s.seed is None else int(s.seed)] for s in _scattered]
    return np.asarray(rows, dtype=np.int64).reshape(len(rows), 2)


def remember_loaded(seeds):
    """Keep the seeds read from a checkpoint until every rank has loaded it (``restore``)."""
    _loaded["seeds"] = np.asarray(seeds, dtype=np.int64).reshape(-1, 2)


def restore(comm):
    """Give every rank the shards of the checkpoint just loaded (collective; same decision on every rank)."""
    saved, _loaded["seeds"] = _loaded["seeds"], None
    if saved is None:
        return []
    mpi = mpi_comm_of(comm)
    notes = []
    for k, (n_then, seed_then) in enumerate(saved.tolist()):
        if k >= len(_scattered):
            notes.append(
                f"scatter_dataset call #{k + 1} of the checkpointed run was not made in this run "
                f"(yet): its shard is not restored and the resume may not be exact"
            )
            continue
        entry = _scattered[k]
        if entry.seed == seed_then:
            continue
        if entry.n != n_then or seed_then < 0 or entry.seed is None or entry.shard() is None:
            why = (
                f"the dataset has {entry.n} examples, {n_then} at the checkpoint"
                if entry.n != n_then
                else "its seed is not an integer"
                if seed_then < 0 or entry.seed is None
                else "its shard no longer exists"
            )
            notes.append(
                f"warning: scatter_dataset call #{k + 1} cannot be given the checkpointed shards "
                f"({why}): the resume is not exact"
            )
            continue
        _reshard(entry, int(seed_then), mpi)
        notes.append(
            f"scatter_dataset call #{k + 1} was shuffled with seed {seed_then} when the checkpoint "
            f"was written (this run drew {entry.seed}): shards restored"
        )
        entry.seed = int(seed_then)
    if notes and mpi.Get_rank() == 0:
        sys.stderr.write("".join(f"mnframe checkpoint: {t}\n" for t in notes))
        sys.stderr.flush()
    return notes


def _is_subdataset(shard):
    import chainer

    return isinstance(shard, chainer.datasets.SubDataset)


def _take(shard, layout, index):
    """The examples at local positions ``index`` of ``shard``, in the layout's wire form."""
    if len(index) == 0:
        return None
    if layout == "pickle" or _is_subdataset(shard):
        items = [shard[int(i)] for i in index]
        if layout == "ndarray":
            return np.stack(items)
        if layout == "tuple":
            return tuple(np.stack(col) for col in zip(*items))
        return items
    if layout == "ndarray":
        return shard[index]
    return tuple(c[index] for c in shard._datasets)


def _put(shard, layout, index, payload):
    if payload is None:
        return
    if layout == "pickle":
        for j, item in zip(index, payload):
            shard[int(j)] = item
    elif layout == "ndarray":
        shard[index] = payload
    else:
        for comp, values in zip(shard._datasets, payload):
            comp[index] = values


def _reshard(entry, seed_then, mpi):
    """Make this rank's shard of ``entry`` the one permutation ``seed_then`` gave it."""
    n, ranges, rank = entry.n, entry.ranges, mpi.Get_rank()
    now = np.random.RandomState(entry.seed).permutation(n)
    then = np.random.RandomState(seed_then).permutation(n)
    position_now = np.empty(n, dtype=np.int64)
    position_now[now] = np.arange(n)
    holder = np.empty(n, dtype=np.int64)  # position -> lowest rank holding it (shards may overlap)
    for r in reversed(range(len(ranges))):
        holder[ranges[r][0] : min(ranges[r][1], n)] = r
    shard = entry.shard()
    my_begin = ranges[rank][0]
    outgoing = []
    for begin, end in ranges:
        source = position_now[then[begin : min(end, n)]]
        wanted = np.nonzero(holder[source] == rank)[0]
        outgoing.append((wanted, _take(shard, entry.layout, source[wanted] - my_begin)))
    with oplog.op("scatter_dataset.restore_shards"):
        incoming = mpi.alltoall(outgoing)
    if _is_subdataset(shard):  # the root's view of the whole dataset: only its order changes
        shard._order = then
        return
    for index, payload in incoming:
        _put(shard, entry.layout, index, payload)
