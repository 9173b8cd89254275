"""The random states a checkpoint must carry for an exact resume.

Chainer's snapshot saves the iterator's current shuffle order but not the
RandomState that draws the *next* epoch's order, nor the global NumPy and
Python generators (dropout, augmentation). ``RngState`` is a Chainer-serializable
object holding all three, per rank, plus the shuffle seeds of ``scatter_dataset``
(mnframe.datasets.shuffle_seeds: a resume restores the checkpointed shards),
and CuPy's generator when the job uses one.

Python's generator is stored as plain numbers (``python_state``: its 624 words and
position; ``python_gauss``: the cached Gaussian), never as a pickle. Checkpoints
written before that hold ``python``, a pickle of ``random.getstate()``: it is read
by ``legacy_python_state``, which walks the pickle's opcodes without executing them
and accepts only ints, floats, None and tuples; anything else is refused (UnsafeFile).

CuPy's generator (dropout on the GPU draws from ``cupy.random``) cannot export
its cuRAND state, so a checkpoint is a re-seeding point instead: saving draws a
new seed from the generator itself, re-seeds it with that seed and stores the
seed; loading re-seeds with the stored one. An uninterrupted run re-seeds at
the same iterations, so a resumed run draws the same GPU numbers after the
checkpoint. "In use" means CuPy is imported and has created the generator of
the current device (``seed_cupy`` does at start-up); a CPU job never imports CuPy.
"""

import pickletools
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
            _save_python(serializer)
        else:
            _load_python(serializer)
        (_save_cupy if saving else _load_cupy)(serializer)


def _save_python(serializer):
    version, internal, gauss = random.getstate()
    serializer("python_state", numpy.asarray(internal, dtype=numpy.uint32))  # 624 words + position
    serializer("python_gauss", numpy.asarray([gauss is not None, gauss or 0.0], dtype=numpy.float64))


def _load_python(serializer):
    if _has_key(serializer, "python_state"):
        internal = serializer("python_state", None)
        if internal is None:  # skipped (a re-sharding resume)
            return
        has_gauss, gauss = (float(v) for v in serializer("python_gauss", None))
        random.setstate((3, tuple(int(v) for v in internal), gauss if has_gauss else None))
        return
    if not _has_key(serializer, "python"):
        return
    saved = serializer("python", None)
    if saved is not None:
        random.setstate(legacy_python_state(numpy.asarray(saved).tobytes(), _where(serializer, "python")))


def _where(deserializer, key):
    file_name = getattr(getattr(deserializer, "npz", None), "name", "the checkpoint")
    return file_name, getattr(deserializer, "path", "") + key


# opcodes of a pickled random.getstate() (protocols 2-5): data and tuples only, no callables
_DATA_OPS = {"PROTO", "FRAME", "MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT", "STOP"}
_VALUE_OPS = {"BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG", "BINFLOAT", "FLOAT", "NONE"}
_TUPLE_N = {"EMPTY_TUPLE": 0, "TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}


def _apply_op(name, arg, stack, memo):
    """Apply one pickle opcode of the plain-data subset to ``stack``/``memo``; False for any other."""
    if name in _VALUE_OPS:
        stack.append(arg)
    elif name == "MARK":
        stack.append(_MARK)
    elif name == "TUPLE":
        at = len(stack) - 1 - stack[::-1].index(_MARK)
        stack[at:] = [tuple(stack[at + 1 :])]
    elif name in _TUPLE_N:
        n = _TUPLE_N[name]
        items = tuple(stack[len(stack) - n :]) if n else ()
        del stack[len(stack) - n :]
        stack.append(items)
    elif name == "MEMOIZE":
        memo[len(memo)] = stack[-1]
    elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
        memo[arg] = stack[-1]
    elif name in ("BINGET", "LONG_BINGET", "GET"):
        stack.append(memo[arg])
    elif name not in _DATA_OPS:
        return False
    return True


RNG_PYTHON_LIMIT = 1 << 16  # a pickled random.getstate() is about 8 KiB


def legacy_python_state(data, where=("the checkpoint", "python")):
    """The ``random.getstate()`` tuple pickled in ``data``, read without unpickling.

    Only the opcodes for ints, floats, None, tuples and the memo are accepted (no
    global, call or object construction), so nothing can run; anything else, or a
    result that is not a generator state, raises UnsafeFile naming the file and entry."""
    from mnframe._internal.npz_read import UnsafeFile

    stack, memo = [], {}

    def refuse(why):
        raise UnsafeFile(
            f"refusing to load {where[0]}: entry {where[1]!r} {why}; it was not unpickled. Python's random "
            f"state of checkpoints written before mnframe stored it as numbers is read only in its plain form"
        )

    try:
        for op, arg, _ in pickletools.genops(data):
            if not _apply_op(op.name, arg, stack, memo):
                refuse(f"is a pickle that uses {op.name} (it could run code)")
    except UnsafeFile:
        raise
    except (ValueError, IndexError, KeyError) as exc:
        refuse(f"is not a readable pickle ({exc})")
    state = stack[-1] if len(stack) == 1 else None
    ok = (
        isinstance(state, tuple)
        and len(state) == 3
        and state[0] == 3
        and isinstance(state[1], tuple)
        and len(state[1]) == 625
        and all(isinstance(v, int) for v in state[1])
        and (state[2] is None or isinstance(state[2], float))
    )
    if not ok:
        refuse("is not a random generator state")
    return state


_MARK = object()


def _has_key(deserializer, key):
    """False for a checkpoint written before ``key`` existed (an NpzDeserializer tells; others: assume yes)."""
    npz = getattr(deserializer, "npz", None)
    if npz is None:
        return True
    return (deserializer.path + key) in npz
