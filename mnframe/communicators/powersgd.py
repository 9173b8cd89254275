"""PowerSGD: low-rank gradient averaging with error feedback (``compression='powersgd'``).

Vogels, Karimireddy and Jaggi, NeurIPS 2019, as PyTorch DDP's ``powerSGD_hook`` runs it.
Per step, for every gradient that is a matrix worth compressing (``compressible``: ndim >= 2,
seen as rows x the rest, smallest side > rank and ``rank*(n+m) < n*m``), on each rank:

1. ``M = grad + error`` (error feedback: what earlier steps' approximations left out);
2. ``P = M Q`` with the previous step's ``Q`` (warm start; the first from a seeded normal draw,
   the same on every rank); every rank's ``P`` averaged in one allreduce; ``P`` orthogonalised
   (Gram-Schmidt);
3. ``Q_local = M^T P``, averaged in one allreduce into ``Q``;
4. the gradient becomes ``P Q^T`` and ``error = M - P Q_local^T`` (this rank's own residual, the
   paper's Algorithm 2; their mean over ranks is the global residual ``mean(M) - P Q^T``).

Vectors, small tensors and every gradient of the first ``start_iter`` steps (a parameter's own
count of averages) are averaged uncompressed, in one allreduce. The allreduces go through the
communicator's own strategy (``average``: float16 wire, shared memory, NCCL, ... as configured).
Orthogonalising and ``P Q^T`` use only elementwise operations and sums on arrays that are equal
on every rank after the allreduces, so every rank ends with bitwise the same gradients without
trusting a BLAS to round alike on every node. NumPy and CuPy alike (``xp`` of the gradient);
float16 gradients are compressed in float32.

State per parameter (``PowerSGD``, kept by parameter object and shared by a communicator's
splits, so the overlap's bucket communicator uses it too): its count of averages, ``Q`` and the
error. ``serialize`` writes it into the optimizer's part of this rank's checkpoint file under
``STATE_KEY`` (per rank: the error differs between ranks); a resume at another world size, or
from a file without it, starts it afresh and says so in one line.
"""

import hashlib
import sys
import weakref

import numpy as np

DEFAULT_RANK = 4
# Uncompressed averages before compression starts (per parameter). The paper compresses from the
# first step; PyTorch's hook defaults to 1000 warm-up steps, which a short job (the digits recipe
# makes 300) never leaves. A few exact steps give Adam's moment estimates an exact start.
DEFAULT_START_ITER = 10
EPSILON = 1e-8  # Gram-Schmidt: a zero column stays zero instead of becoming NaN
STATE_KEY = "mnframe_powersgd"  # the checkpoint keys' part that marks this (per-rank) state


def matrix_shape(shape):
    """The 2-D view PowerSGD compresses: (first dimension, product of the others)."""
    return int(shape[0]), int(np.prod(shape[1:], dtype=np.int64))


def compressible(shape, rank):
    """Whether a gradient of ``shape`` is compressed at ``rank``: a matrix (ndim >= 2) whose
    smallest side exceeds the rank and whose factors are smaller than itself."""
    if len(shape) < 2:
        return False
    n, m = matrix_shape(shape)
    return min(n, m) > rank and rank * (n + m) < n * m


def wire_elements(shapes, rank):
    """(elements one rank hands to allreduce per compressed step, elements without compression)
    for gradients of ``shapes``: P and Q of each compressible matrix, every other tensor whole."""
    sent = full = 0
    for shape in shapes:
        size = int(np.prod(shape, dtype=np.int64))
        full += size
        if compressible(shape, rank):
            n, m = matrix_shape(shape)
            sent += rank * (n + m)
        else:
            sent += size
    return sent, full


class _Slot:
    """A stand-in parameter whose gradient is a P or Q factor (what the strategies read)."""

    __slots__ = ("array", "grad")

    def __init__(self, array):
        self.array = array
        self.grad = array


class _State:
    __slots__ = ("ref", "steps", "q", "error")

    def __init__(self, ref):
        self.ref = ref
        self.steps = 0  # averages of this parameter so far (warm-up ones included)
        self.q = None  # (m, rank), equal on every rank
        self.error = None  # (n, m), this rank's residual


def _xp(a):
    from chainer import backend

    return backend.get_array_module(a)


def orthogonalize(a, eps=EPSILON):
    """Gram-Schmidt on the columns of ``a`` in place (PyTorch's ``_orthogonalize_gram_schmidt``)."""
    xp = _xp(a)
    for i in range(a.shape[1]):
        col = a[:, i : i + 1]
        col /= xp.sqrt(xp.sum(col * col)) + eps
        if i + 1 < a.shape[1]:
            rest = a[:, i + 1 :]
            rest -= xp.sum(col * rest, axis=0) * col


def outer_sum(p, q, out=None, scratch=None):
    """``p @ q.T`` by elementwise products, into ``out`` (the same bits wherever the inputs are the
    same, unlike a BLAS); ``scratch``: a buffer of ``out``'s shape to reuse."""
    xp = _xp(p)
    pt, qt = xp.ascontiguousarray(p.T), xp.ascontiguousarray(q.T)  # contiguous columns: SIMD loops
    out = xp.multiply(pt[0][:, None], qt[0], out=out)
    if len(pt) > 1 and scratch is None:
        scratch = xp.empty_like(out)
    for k in range(1, len(pt)):
        xp.multiply(pt[k][:, None], qt[k], out=scratch)
        out += scratch
    return out


def initial_q(name, m, rank, dtype, xp):
    """Q before the first compressed step: a normal draw seeded by the parameter's name (every
    rank draws the same; the training's random streams are left alone), orthogonalised."""
    seed = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=4).digest(), "little")
    q = xp.asarray(np.random.RandomState(seed).standard_normal((m, rank)).astype(dtype))
    orthogonalize(q)
    return q


class PowerSGD:
    """Per-parameter compression state and the compressed average (see the module doc)."""

    def __init__(self):
        self._states = {}  # id(param) -> _State (checked against a weak reference)
        self._prune_at = 256
        # elements and bytes handed to the allreduces, compressed and as they would be without
        self.stats = {"steps": 0, "elements": 0, "uncompressed_elements": 0, "bytes": 0, "uncompressed_bytes": 0}
        self.last = {k: 0 for k in self.stats if k != "steps"}  # of the last call
        self.announced = False  # rank 0 said that compression started

    # ---- state
    def state(self, param):
        """This parameter's state (created empty on first use)."""
        st = self._states.get(id(param))
        if st is None or st.ref() is not param:
            if len(self._states) >= self._prune_at:  # parameters of models gone: drop their state
                self._prune()
                self._prune_at = max(256, 2 * len(self._states))
            st = self._states[id(param)] = _State(weakref.ref(param))
        return st

    def _prune(self):
        for key in [k for k, s in self._states.items() if s.ref() is None]:
            del self._states[key]

    def reset(self, params):
        """Forget the state of ``params`` (a resize, a checkpoint without it)."""
        for p in params:
            self._states.pop(id(p), None)

    # ---- the average
    def mean(self, named, rank, start_iter, average, wire_itemsize=None):
        """Average the gradients of ``named`` ([(name, param)], every gradient set) in place.

        ``average(named)``: the communicator's uncompressed average of [(name, obj with .array,
        .grad)] (None on one rank: the mean is the value itself). ``wire_itemsize``: bytes per
        element on the wire (None: each gradient's own), for ``stats``."""
        rest, mats = [], []
        for name, p in named:
            st = self.state(p)
            st.steps += 1
            target = mats if st.steps > start_iter and compressible(p.grad.shape, rank) else rest
            target.append((name, p, st))

        def itemsize(p):
            return wire_itemsize or p.grad.dtype.itemsize

        full = sum(int(p.grad.size) for _, p in named)
        full_bytes = sum(int(p.grad.size) * itemsize(p) for _, p in named)
        elements = sum(int(p.grad.size) for _, p, _ in rest)
        nbytes = sum(int(p.grad.size) * itemsize(p) for _, p, _ in rest)
        if rest and average is not None:
            average([(name, p) for name, p, _ in rest])
        if mats:
            sent, sent_bytes = self._compressed(mats, rank, average, wire_itemsize)
            elements += sent
            nbytes += sent_bytes
        self.last = {
            "elements": elements,
            "uncompressed_elements": full,
            "bytes": nbytes,
            "uncompressed_bytes": full_bytes,
        }
        self.stats["steps"] += 1
        for key, value in self.last.items():
            self.stats[key] += value

    def _compressed(self, mats, rank, average, wire_itemsize):
        ms, ps = [], []
        for name, p, st in mats:
            grad = p.grad
            xp = _xp(grad)
            dtype = np.promote_types(grad.dtype, np.float32)
            n, m = matrix_shape(grad.shape)
            if st.error is not None and st.error.shape == (n, m) and st.error.dtype == dtype:
                mat = st.error  # M = error + gradient, in the error's buffer (it becomes the new error)
                mat += grad.reshape(n, m)
            else:
                mat = grad.reshape(n, m).astype(dtype, copy=True)
            st.error = None  # until this step's error is in ``mat``
            if st.q is None or st.q.shape != (m, rank) or st.q.dtype != dtype:
                st.q = initial_q(name, m, rank, dtype, xp)
            else:
                orthogonalize(st.q)  # as PyTorch's hook does with a warm-started Q
            ms.append(mat)
            ps.append(mat @ st.q)
        ps = self._average(mats, ps, average)
        qs_local = []
        for mat, p in zip(ms, ps):
            orthogonalize(p)
            qs_local.append(mat.T @ p)
        qs = self._average(mats, [q.copy() for q in qs_local], average)
        for (_, param, st), mat, p, q, q_local in zip(mats, ms, ps, qs, qs_local):
            xp = _xp(mat)
            scratch = p @ q_local.T  # this rank's own approximation
            mat -= scratch
            st.q, st.error = q, mat  # error feedback: M - P Q_local^T
            out = outer_sum(p, q, out=xp.empty(mat.shape, mat.dtype), scratch=scratch)  # the same on every rank
            param.grad = out.reshape(param.grad.shape).astype(param.grad.dtype, copy=False)
        sent = sum(int(p.size) + int(q.size) for p, q in zip(ps, qs))
        sent_bytes = sum((int(p.size) + int(q.size)) * (wire_itemsize or p.dtype.itemsize) for p, q in zip(ps, qs))
        return sent, sent_bytes

    @staticmethod
    def _average(mats, arrays, average):
        """The mean over the ranks of each rank's ``arrays`` (one allreduce), as new arrays."""
        if average is None:
            return arrays
        slots = [(name, _Slot(a)) for (name, _, _), a in zip(mats, arrays)]
        average(slots)
        return [s.grad.copy() for _, s in slots]  # the strategy may hand back views of its buffer

    # ---- checkpoints
    def serialize(self, serializer, target, world_size, say_rank0=False):
        """Write or read the state of ``target``'s parameters (``serializer``: a child named
        ``STATE_KEY``). A file without it, or from another world size, starts it afresh."""
        import chainer

        named = sorted(target.namedparams())
        if not isinstance(serializer, chainer.serializer.Deserializer):
            serializer("world_size", np.int64(world_size))
            for name, p in named:
                st = self._states.get(id(p))
                st = st if st is not None and st.ref() is p else None
                key = name.lstrip("/")
                serializer(f"{key}/steps", np.int64(0 if st is None else st.steps))
                has = st is not None and st.q is not None
                serializer(f"{key}/compressed", np.int64(has))
                if has:
                    serializer(f"{key}/q", _host(st.q))
                    serializer(f"{key}/error", _host(st.error))
            return
        try:
            saved = serializer("world_size", None)
        except KeyError:
            saved, why = None, "the checkpoint holds none"
        else:
            why = None if saved is not None and int(saved) == world_size else "the world size changed"
        self.reset(p for _, p in named)
        if why is not None:
            if say_rank0:
                sys.stderr.write(f"mnframe powersgd: compression state (Q, error feedback) starts afresh: {why}\n")
                sys.stderr.flush()
            return
        for name, p in named:
            key = name.lstrip("/")
            st = self.state(p)
            st.steps = int(serializer(f"{key}/steps", None))
            if int(serializer(f"{key}/compressed", None)):
                st.q = _to_device(serializer(f"{key}/q", None), p)
                st.error = _to_device(serializer(f"{key}/error", None), p)


def _host(a):
    return a if isinstance(a, np.ndarray) else a.get()


def _to_device(a, param):
    """A loaded array on the device of ``param`` (NumPy while the parameter has no array yet)."""
    a = np.array(a)
    if param.array is None or isinstance(param.array, np.ndarray):
        return a
    from chainer import backend

    return backend.get_device_from_array(param.array).send(a)
