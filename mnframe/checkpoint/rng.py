"""The random states a checkpoint must carry for an exact resume.

Chainer's snapshot saves the iterator's current shuffle order but not the
RandomState that draws the *next* epoch's order, nor the global NumPy and
Python generators (dropout, augmentation). ``RngState`` is a Chainer-serializable
object holding all three, per rank, plus the shuffle seeds of ``scatter_dataset``
(mnframe.datasets.shuffle_seeds: a resume restores the checkpointed shards),
and CuPy's generator when the job uses one.

CuPy's generator (dropout on the GPU draws from ``cupy.random``) cannot export
its cuRAND state, so a checkpoint is a re-seeding point instead: saving draws a
new seed from the generator itself, re-seeds it with that seed and stores the
seed; loading re-seeds with the stored one. An uninterrupted run re-seeds at
the same iterations, so a resumed run draws the same GPU numbers after the
checkpoint. "In use" means CuPy is imported and has created the generator of
the current device (``seed_cupy`` does at start-up); a CPU job never imports CuPy.
"""

import pickle
import random
import sys

import numpy

_GLOBAL_NUMPY = numpy.random.mtrand._rand


def _sampler_states(iterators):
    """{name: RandomState} of iterators whose order sampler owns a private generator."""
    found = {}
    for name, it in sorted(iterators.items()):
        sampler = getattr(it, "order_sampler", None)
        rs = getattr(sampler, "_random", None)
        if isinstance(rs, numpy.random.RandomState) and rs is not _GLOBAL_NUMPY:
            found[name] = rs
    return found


def _save_mt(serializer, rs):
    kind, keys, pos, has_gauss, cached = rs.get_state()
    serializer("keys", numpy.asarray(keys, dtype=numpy.uint32))
    serializer("pos_gauss", numpy.asarray([pos, has_gauss], dtype=numpy.int64))
    serializer("cached_gaussian", numpy.asarray([cached], dtype=numpy.float64))


def _load_mt(serializer, rs):
    keys = serializer("keys", None)
    if keys is None:  # skipped (a re-sharding resume ignores per-rank state): keep the current one
        return
    keys = numpy.asarray(keys, dtype=numpy.uint32)
    pos, has_gauss = (int(v) for v in serializer("pos_gauss", None))
    cached = float(serializer("cached_gaussian", None)[0])
    rs.set_state(("MT19937", keys, pos, has_gauss, cached))


def seed_cupy(seed):
    """Seed CuPy's generator of the current device (call after the device is chosen)."""
    import cupy

    cupy.random.seed(seed)


def _cupy_random_state():
    """CuPy's generator of the current device if this process uses one, else None."""
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return None
    try:
        return cupy.random._generator._random_states.get(cupy.cuda.Device().id)
    except Exception:  # CuPy without a usable device
        return None


def _save_cupy(serializer):
    rs = _cupy_random_state()
    if rs is None:
        return
    drawn = numpy.asarray(rs.random_sample((1,), dtype=numpy.float64).get(), dtype=numpy.float64)
    seed = int(drawn.view(numpy.uint64)[0])
    rs.seed(seed)
    serializer("cupy_seed", numpy.asarray([seed], dtype=numpy.uint64))


def _load_cupy(serializer):
    try:
        saved = serializer("cupy_seed", None)
    except KeyError:  # saved by a job that did not use CuPy
        return
    if saved is None or sys.modules.get("cupy") is None:
        return
    rs = _cupy_random_state()
    if rs is None:
        rs = sys.modules["cupy"].random.get_random_state()
    rs.seed(int(numpy.asarray(saved, dtype=numpy.uint64).reshape(-1)[0]))


class RngState:
    """Serializes NumPy's and Python's global generators, the iterators' samplers and CuPy's seed."""

    def __init__(self, iterators_fn):
        self._iterators_fn = iterators_fn  # () -> {name: iterator}, read at save/load time

    def serialize(self, serializer):
        import chainer

        saving = isinstance(serializer, chainer.serializer.Serializer)
        gens = [("numpy", _GLOBAL_NUMPY)] + [
            (f"iterator:{name}", rs) for name, rs in _sampler_states(self._iterators_fn()).items()
        ]
        for key, rs in gens:
            (_save_mt if saving else _load_mt)(serializer[key], rs)
        from mnframe.datasets import shuffle_seeds

        if saving:
            serializer("scatter_seeds", shuffle_seeds.saved_state())
        elif _has_key(serializer, "scatter_seeds"):
            seeds = serializer("scatter_seeds", None)
            if seeds is not None:
                shuffle_seeds.remember_loaded(seeds)
        if saving:
            serializer("python", numpy.frombuffer(pickle.dumps(random.getstate()), dtype=numpy.uint8))
        else:
            saved = serializer("python", None)
            if saved is not None:
                random.setstate(pickle.loads(numpy.asarray(saved).tobytes()))
        (_save_cupy if saving else _load_cupy)(serializer)


def _has_key(deserializer, key):
    """False for a checkpoint written before ``key`` existed (an NpzDeserializer tells; others: assume yes)."""
    npz = getattr(deserializer, "npz", None)
    if npz is None:
        return True
    return (deserializer.path + key) in npz
