"""Saving and loading a whole Chainer Trainer into a checkpoint directory, one file per rank.

Each rank saves ``trainer`` (parameters, optimizer state, updater iteration,
iterator position and shuffle order, extension states, and through the
checkpoint extension the random states) into ``rank_<R>.npz``. With the same
world size each rank loads its own file: an exact resume. With a different
world size every rank loads the file of a rank that ran the same model-parallel
stage (``mnframe.checkpoint.reshard``; rank 0's for data parallelism) but skips the
per-rank parts (iterator positions and random states): the data is re-sharded and
iterators restart their epoch. Files are read with ``mnframe.utils.safe_npz`` (no pickle, bounded
sizes, uncompressed only, no entry larger than the array it fills): a file that could run code
is refused on every rank with status 2. The store checks every file first (``admit``), so a
refused checkpoint is normally skipped before it gets here.
"""

import os

from mnframe.checkpoint.layout import rank_file
from mnframe.checkpoint.manifest import outside_problem
from mnframe.communicators.verdict import distinct
from mnframe.runtime.errors import ResumeFailed
from mnframe.utils import collectives
from mnframe.utils.fs import atomic_path
from mnframe.utils.npz import WriteFailed, payload_bytes, serialize, write_npz
from mnframe.utils.safe_npz import UnsafeFile, load_npz

RNG_KEY = "mnframe_rng"
PER_RANK_KEYS = ("updater/iterator:", f"/{RNG_KEY}/")


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


def _is_per_rank(key):
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
            load_npz(path, trainer, ignore_names=_is_per_rank if resharded else None, stored_only=True)
    except UnsafeFile as exc:
        unsafe = str(exc)
    except Exception as exc:
        err = f"rank {comm.rank} could not load {path}: {type(exc).__name__}: {exc}"
    # the same one line on every rank; an unsafe file first (nothing from it ran)
    collectives.share_verdict(comm, unsafe, "checkpoint.safe_load", UnsafeFile, distinct)
    collectives.share_verdict(comm, err, "checkpoint.load", ResumeFailed, _resume_failed)
    return resharded


def _resume_failed(f) -> str:
    """The ``verdict`` wording of a failed load: every rank's error."""
    return "could not load the checkpoint (did the model, optimizer or extensions change?): " + "; ".join(
        e for _, e in f.bad
    )
