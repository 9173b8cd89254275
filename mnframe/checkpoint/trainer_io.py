"""Saving and loading a whole Chainer Trainer into a checkpoint directory, one file per rank.

Each rank saves ``trainer`` (parameters, optimizer state, updater iteration,
iterator position and shuffle order, extension states, and through the
checkpoint extension the random states) into ``rank_<R>.npz``. With the same
world size each rank loads its own file: an exact resume. With a different
world size every rank loads the file of a rank that ran the same model-parallel
stage (``mnframe.checkpoint.reshard``; rank 0's for data parallelism) but skips the
per-rank parts (iterator positions and random states): the data is re-sharded and
iterators start their epoch over, keeping the epoch count (``keep_epochs``). Files are read with
``mnframe._internal.npz_read`` (no pickle, bounded sizes, uncompressed only, no entry larger than
the array it fills): a file that could run code is refused on every rank with status 2. The store
checks every file first (``admit``), so a refused checkpoint is normally skipped before it gets here.
"""

import os

from mnframe._internal.npz_read import UnsafeFile, load_npz
from mnframe._internal.npz_write import WriteFailed, payload_bytes, serialize, write_npz
from mnframe.checkpoint.layout import rank_file
from mnframe.checkpoint.manifest import outside_problem
from mnframe.communicators import host_collectives
from mnframe.communicators.powersgd import STATE_KEY as POWERSGD_KEY
from mnframe.communicators.verdict import distinct
from mnframe.runtime.errors import ResumeFailed
from mnframe.runtime.fs import atomic_path

RNG_KEY = "mnframe_rng"
# each rank's own state: skipped when a resize loads another rank's file, and not compared between
# replicas (the iterators' positions, random states, PowerSGD's error feedback and Q)
PER_RANK_KEYS = ("updater/iterator:", f"/{RNG_KEY}/", f"/{POWERSGD_KEY}/")


def save_trainer(directory, trainer, rank, identity=None):
    """Write this rank's trainer state (plus ``identity``, ``admit.identity_arrays``: whose file
    it is, inside the hashed content); return the file names written.

    An OSError (a full disk) becomes ``WriteFailed`` naming the path and the bytes needed."""
    return [write_rank_arrays(directory, rank, {**serialize(trainer), **(identity or {})})]


def write_rank_arrays(directory, rank, arrays):
    """Write ``arrays`` as this rank's file in ``directory`` (atomically, fsynced); return its
    name. An OSError becomes ``WriteFailed`` naming the path and the bytes needed."""
    name = rank_file(rank)
    path = os.path.join(directory, name)
    try:
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                write_npz(f, arrays, compression=False)  # closes its zip even on a full disk
    except OSError as exc:
        raise WriteFailed(path, payload_bytes(arrays), exc) from exc
    return name


def is_per_rank(key):
    """Whether archive ``key`` holds state of its own rank only (``PER_RANK_KEYS``)."""
    return any(part in key for part in PER_RANK_KEYS)


def load_trainer(directory, manifest, trainer, comm, source=None):
    """Load the checkpoint into ``trainer`` on every rank; same error on every rank if one fails.

    ``source``: the file this rank loads (``mnframe.checkpoint.reshard``: its stage's state at
    another world size); None: its own file at the same world size, rank 0's otherwise."""
    resharded = manifest.world_size != comm.size
    name = source or rank_file(0 if resharded else comm.rank)
    path = os.path.join(directory, name)
    err = unsafe = None
    try:
        unsafe = outside_problem(directory, name)
        if unsafe is None:
            load_npz(path, trainer, ignore_names=is_per_rank if resharded else None, stored_only=True)
            if resharded:
                keep_epochs(path, trainer)
    except UnsafeFile as exc:
        unsafe = str(exc)
    except Exception as exc:
        err = f"rank {comm.rank} could not load {path}: {type(exc).__name__}: {exc}"
    # the same one line on every rank; an unsafe file first (nothing from it ran)
    host_collectives.share_verdict(comm, unsafe, "checkpoint.safe_load", UnsafeFile, distinct)
    host_collectives.share_verdict(comm, err, "checkpoint.load", ResumeFailed, _resume_failed)
    return resharded


def keep_epochs(path, trainer):
    """At another world size each iterator starts its epoch over (positions and shuffle orders
    are per rank) but its epoch count goes on from the file's: a rank's shard is one pass over
    the data at any world size, so the summary ("40 iterations (2 epochs)"), the log and an
    epoch stop trigger count the run's epochs, not only those since the resize (issue 38)."""
    from chainer.serializers import DictionarySerializer
    from chainer.serializers.npz import NpzDeserializer

    from mnframe._internal.npz_read import SafeNpz

    iterators = dict(getattr(trainer.updater, "_iterators", None) or {})
    with SafeNpz(path) as npz:
        for name, iterator in iterators.items():
            key = f"updater/iterator:{name}/epoch"
            if key not in npz:
                continue
            state = {}
            iterator.serialize(DictionarySerializer(state))  # its fresh state, in the same keys
            if "epoch" not in state:
                continue
            state["epoch"] = npz[key]
            iterator.serialize(NpzDeserializer(state))


def _resume_failed(f) -> str:
    """The ``verdict`` wording of a failed load: every rank's error."""
    return "could not load the checkpoint (did the model, optimizer or extensions change?): " + "; ".join(
        e for _, e in f.bad
    )
