"""Whether a checkpoint may be loaded: the one set of checks resume and ``checkpoint verify`` share.

Hashes catch corruption, not a file planted by someone who resealed the manifest (issue 38).
Before anything is loaded, every file of a checkpoint is checked as data, without MPI:

* its size and SHA-256 against the manifest (``manifest.check_file``; with ``hashed=False``
  only its size, as ``checkpoint.verify=false`` asks);
* a rank file is opened with ``SafeNpz(stored_only=True)``: no pickle, no object array, every
  ``.npy`` header consistent with its size, and no compressed member (mnframe writes rank files
  uncompressed, so no entry can declare more bytes than the file holds: a zip bomb is refused
  before anything is inflated);
* its identity (``IDENTITY``, written inside the hashed file by ``identity_arrays``): the run,
  the iteration, the world size and the writing rank must be the manifest's and the file
  name's, so a rank file copied from another run, another iteration or another rank is refused.

``problems(directory, manifest, names)`` returns every problem (one line each); the checkpoint
store runs it spread over the ranks and shares the result, so every rank reaches the same
verdict before any collective that depends on the files, and a refused checkpoint is moved
aside like a damaged one. ``checkpoint verify`` runs the same function in one process.
"""

import os
import re

import numpy

from mnframe._internal.npz_read import SafeNpz, UnsafeFile
from mnframe.checkpoint.manifest import check_file

IDENTITY = "mnframe_identity/"
RUN_KEY = IDENTITY + "run"  # the run's id, a string scalar
NUMBERS_KEY = IDENTITY + "numbers"  # int64 [iteration, world size, writing rank]
_RANK_FILE = re.compile(r"^rank_(\d{5,})\.npz$")
MAX_RUN_ID = 64


def identity_arrays(run_id, iteration, world_size, rank):
    """The entries a rank file carries to say whose it is (added to the trainer's arrays)."""
    return {
        RUN_KEY: numpy.array(str(run_id)[:MAX_RUN_ID]),
        NUMBERS_KEY: numpy.array([int(iteration), int(world_size), int(rank)], dtype=numpy.int64),
    }


def _read_identity(npz, path):
    """(run id, [iteration, world size, rank]) or None when the file carries none; UnsafeFile
    when the entries are not what ``identity_arrays`` writes (checked before reading them)."""
    if RUN_KEY not in npz and NUMBERS_KEY not in npz:
        return None
    for key, ok in (
        (RUN_KEY, lambda s, d: s == () and d.kind == "U" and d.itemsize <= 4 * MAX_RUN_ID),
        (NUMBERS_KEY, lambda s, d: s == (3,) and d == numpy.int64),
    ):
        if key not in npz or not ok(*npz.declared(key)):
            raise UnsafeFile(f"refusing to load {path}: its identity entry {key!r} is missing or malformed")
    return str(npz[RUN_KEY][()]), [int(v) for v in npz[NUMBERS_KEY]]


def _legacy_rng_states(npz, path):
    """A Python random state pickled by an older mnframe is read by opcode at load time
    (``rng.legacy_python_state``); walk it here too, so that one holding anything else is
    refused before loading (UnsafeFile), like any unsafe entry."""
    from mnframe.checkpoint.rng import RNG_PYTHON_LIMIT, legacy_python_state

    for key in npz:
        if key.rsplit("/", 1)[-1] == "python" and "mnframe_rng/" in key:
            if npz.nbytes(key) > RNG_PYTHON_LIMIT:
                raise UnsafeFile(f"refusing to load {path}: entry {key!r} is too large to be a random state")
            legacy_python_state(numpy.asarray(npz[key]).tobytes(), (path, key))


def identity_problem(path, name, entry, manifest, found):
    """Why the identity ``found`` in rank file ``name`` does not belong to ``manifest``, or None."""
    where = f"{path} (written by rank {entry.rank})"
    if found is None:
        if getattr(manifest, "run_id", None) is None:
            return None  # written before rank files carried an identity
        return f"{where} carries no run identity but the checkpoint belongs to run {manifest.run_id}: a foreign file"
    run, (iteration, world_size, rank) = found
    match = _RANK_FILE.match(name)
    expected = {
        "run": (run, getattr(manifest, "run_id", None) or run),
        "iteration": (iteration, manifest.iteration),
        "world size": (world_size, manifest.world_size),
        "rank": (rank, entry.rank),
    }
    if match:
        expected["rank in the file name"] = (rank, int(match.group(1)))
    wrong = [f"{what} {got} (expected {want})" for what, (got, want) in expected.items() if got != want]
    if wrong:
        return (
            f"{where} does not belong to this checkpoint: it was written with {', '.join(wrong)} "
            f"(a rank file from another run, iteration or rank)"
        )
    return None


def file_problem(directory, name, entry, manifest, hashed=True):
    """None if file ``name`` of the checkpoint in ``directory`` may be loaded, else why not (one line)."""
    path = os.path.join(directory, name)
    try:
        problem = check_file(directory, name, entry, hashed=hashed)
        if problem or not name.endswith(".npz"):
            return problem
        with SafeNpz(path, stored_only=True) as npz:
            _legacy_rng_states(npz, path)
            return identity_problem(path, name, entry, manifest, _read_identity(npz, path))
    except UnsafeFile as exc:
        return str(exc)
    except OSError as exc:
        return f"{path} (written by rank {entry.rank}) cannot be read: {exc}"


def problems(directory, manifest, names=None, hashed=True):
    """Every problem with the files ``names`` (default: all) of the checkpoint in ``directory``."""
    names = sorted(manifest.files) if names is None else names
    return [p for f in names if (p := file_problem(directory, f, manifest.files[f], manifest, hashed))]
