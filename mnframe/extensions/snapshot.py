"""Multi-node wrapper for chainer's snapshot extension, with replica sets.

Ranks are split into *replica sets* whose members hold identical state (e.g.
rank 0, which alone has LogReport/PrintReport, and all the others). Only the
lowest rank of each set (its master) writes snapshots, to
``<snapshot filename>.<master rank>``; on start-up with ``autoload`` the master
loads its newest file and sends the state to the rest of its set. Because the
file names depend on set masters, not on the world size, a job can restart
with a different number of ranks.

The wrapper works on its own copy of the given snapshot extension (the
caller's object is not modified). Once the mnframe runtime is active, a
SIGTERM/SIGUSR1 makes the masters write a snapshot at the end of that
iteration and the trainer stop (status 0), as with mnframe's checkpoints.

Files are data only: the copy writes with ``mnframe._internal.npz_write.save_npz`` (no pickle,
when the snapshot used Chainer's default ``save_npz``) and autoloads through
``mnframe._internal.npz_read`` (Chainer's own autoload allows pickles).
"""

import copy
import io
import os
import sys

from chainer.serializers import npz as chainer_npz
from chainer.training import extension

from mnframe._internal.npz_read import load_npz
from mnframe._internal.npz_write import save_npz
from mnframe.communicators import host_collectives
from mnframe.runtime import activation, preemption
from mnframe.runtime.mpi_comm import mpi_comm_of

__all__ = ["multi_node_snapshot", "parse_replica_sets"]


def multi_node_snapshot(comm, snapshot, replica_sets):
    """Wrap ``snapshot`` (from ``chainer.training.extensions.snapshot``) for many ranks.

    Args:
        comm: a mnframe communicator (or an mpi4py communicator).
        snapshot: the snapshot extension to wrap.
        replica_sets: list of replica sets, each a rank (int) or an iterable of
            ranks; ranks not named form one more set. ``[0]`` with 4 ranks gives
            ``[{0}, {1, 2, 3}]``; ``[]`` gives one set with every rank.
    """
    return MultiNodeSnapshot(comm, snapshot, replica_sets)


def parse_replica_sets(replica_sets, size):
    """The list of disjoint rank sets covering ``range(size)`` (see multi_node_snapshot)."""
    sets = []
    for spec in replica_sets:
        members = {spec} if isinstance(spec, int) else set(spec)
        out_of_range = sorted(r for r in members if not 0 <= r < size)
        if out_of_range:
            raise ValueError(f"replica set {sorted(members)} names ranks {out_of_range} outside 0..{size - 1}")
        if not members:
            raise ValueError("a replica set must not be empty")
        sets.append(members)
    seen = set()
    for s in sets:
        if seen & s:
            raise ValueError(f"replica sets overlap on ranks {sorted(seen & s)}: each rank may belong to one set only")
        seen |= s
    rest = set(range(size)) - seen
    if rest:
        sets.append(rest)
    return sets


def _initialize_safely(snapshot, trainer):
    """``snapshot.initialize(trainer)`` with its autoload done by ``npz_read.load_npz``."""
    if not getattr(snapshot, "autoload", False) or not isinstance(snapshot.filename, str):
        snapshot.initialize(trainer)
        return
    from chainer.training.extensions._snapshot import _find_latest_snapshot

    target = trainer if getattr(snapshot, "_target", None) is None else snapshot._target
    latest = _find_latest_snapshot(snapshot.filename, trainer.out)
    if latest is not None:
        load_npz(os.path.join(trainer.out, latest), target)
    snapshot.autoload = False
    try:
        snapshot.initialize(trainer)  # the cleanup hook, without Chainer's loading
    finally:
        snapshot.autoload = True


class MultiNodeSnapshot(extension.Extension):
    """See ``multi_node_snapshot``."""

    def __init__(self, comm, snapshot, replica_sets):
        if snapshot is None:
            raise ValueError("multi_node_snapshot needs a snapshot extension, got None")
        self.comm = comm
        mpi_comm = mpi_comm_of(comm)
        self.rank = mpi_comm.Get_rank()
        sets = parse_replica_sets(replica_sets, mpi_comm.Get_size())
        self.replica_set = next(s for s in sets if self.rank in s)
        self.master = min(self.replica_set)
        self.snapshot = copy.copy(snapshot)
        self.snapshot.filename = _with_suffix(snapshot.filename, self.master)
        writer = getattr(snapshot, "writer", None)
        if getattr(writer, "_savefun", None) is chainer_npz.save_npz:
            self.snapshot.writer = copy.copy(writer)
            self.snapshot.writer._savefun = save_npz  # the same archive, without pickles
        # Run when and in the order the wrapped snapshot would.
        self.trigger = getattr(snapshot, "trigger", extension.Extension.trigger)
        self.priority = getattr(snapshot, "priority", extension.PRIORITY_READER)

    @property
    def is_master(self):
        return self.rank == self.master

    def initialize(self, trainer):
        if activation.activated():
            preemption.watch(trainer, self, self.comm)
        sharing = getattr(self.snapshot, "autoload", False) and len(self.replica_set) > 1
        if not sharing:
            if self.is_master:
                _initialize_safely(self.snapshot, trainer)
            return
        target = trainer if getattr(self.snapshot, "_target", None) is None else self.snapshot._target
        if self.is_master:
            error = data = None
            try:
                _initialize_safely(self.snapshot, trainer)  # autoloads this set's newest snapshot, if any
                if _latest_snapshot(self.snapshot.filename, trainer.out) is not None:
                    buf = io.BytesIO()
                    save_npz(buf, target)
                    data = buf.getvalue()
            except Exception as e:
                error = f"{type(e).__name__}: {e}"
            # The members wait for the master: tell them about a failure too.
            for r in sorted(self.replica_set - {self.rank}):
                host_collectives.send_obj(self.comm, (error, data), r, name="snapshot.share_loaded")
            if error is not None:
                raise RuntimeError(f"multi_node_snapshot: rank {self.rank} could not autoload its snapshot: {error}")
        else:
            error, data = host_collectives.recv_obj(self.comm, self.master, name="snapshot.share_loaded")
            if error is not None:
                raise RuntimeError(
                    f"multi_node_snapshot: master rank {self.master} of this "
                    f"replica set could not autoload its snapshot: {error}"
                )
            if data is not None:
                load_npz(io.BytesIO(data), target)

    def __call__(self, trainer):
        if self.is_master:
            self.snapshot(trainer)
            if preemption.preempted():
                sys.stderr.write(
                    f"mnframe: preempted; rank {self.rank} wrote its snapshot at iteration "
                    f"{trainer.updater.iteration}, stopping\n"
                )

    def on_error(self, trainer, exc, tb):
        if self.is_master:
            self.snapshot.on_error(trainer, exc, tb)

    def finalize(self):
        if self.is_master:
            self.snapshot.finalize()

    def serialize(self, serializer):
        self.snapshot.serialize(serializer)


def _with_suffix(filename, rank):
    """The snapshot file name (format string or callable) with ``.<rank>`` appended."""
    if callable(filename):

        def named(trainer):
            return f"{filename(trainer)}.{rank}"

        return named
    return f"{filename}.{rank}"


def _latest_snapshot(fmt, directory):
    """Newest (by mtime) file matching ``fmt``'s prefix and suffix, as chainer's autoload finds it."""
    if not isinstance(fmt, str):
        return None
    prefix, suffix = fmt.split("{")[0], fmt.split("}")[-1]
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix) and n.endswith(suffix)]
    except FileNotFoundError:
        return None
    if not names:
        return None
    return max(names, key=lambda n: os.stat(os.path.join(directory, n)).st_mtime)
