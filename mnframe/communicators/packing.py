"""Flat gradient buffers: which gradients go where, and copying them in and out.

A ``Layout`` places every gradient that takes part in averaging (parameters in
sorted ``namedparams()`` order, grouped by the dtype used on the wire) at a
fixed offset of one byte buffer. Its ``key`` is a hash of the names, shapes,
dtypes and which gradients exist; ranks compare keys before reducing so a rank
with a missing or differently shaped gradient is caught on every rank.

After averaging, ``unpack`` sets each ``param.grad`` to a view of the buffer
when the dtypes agree, so nothing is copied back; the next ``pack`` then skips
gradients that are still those views. Views keep pointing into the buffer:
``release`` replaces them with copies before a buffer is freed.
"""

import dataclasses
import hashlib

import numpy as np

from mnframe.communicators import half

ALIGN = 64  # bytes; every group starts on a cache line


@dataclasses.dataclass(frozen=True)
class Entry:
    index: int  # position in the params list
    name: str
    shape: tuple
    size: int  # elements
    offset: int  # elements from the start of its group


@dataclasses.dataclass(frozen=True)
class Group:
    dtype: np.dtype  # wire dtype
    entries: tuple
    size: int  # elements
    byte_offset: int


@dataclasses.dataclass(frozen=True)
class Layout:
    key: int
    groups: tuple
    nbytes: int
    wire: object = None  # the dtype between nodes (allreduce_grad_dtype; None: each group's own)

    def group_arrays(self, buf):
        """Typed 1-d views of ``buf`` (uint8), one per group."""
        return [buf[g.byte_offset : g.byte_offset + g.size * g.dtype.itemsize].view(g.dtype) for g in self.groups]

    def entry_views(self, buf):
        """[(entry, shaped view of ``buf``, wire dtype, group index)] for every participating parameter.

        Built once per buffer and reused: handing out these very objects as
        ``param.grad`` lets the next ``pack`` recognise them with ``is``.
        """
        out = []
        for gi, (g, arr) in enumerate(zip(self.groups, self.group_arrays(buf))):
            out.extend((e, arr[e.offset : e.offset + e.size].reshape(e.shape), g.dtype, gi) for e in g.entries)
        return out


def _xp_name(a):
    return "numpy" if a is None or isinstance(a, np.ndarray) else type(a).__module__.split(".")[0]


def describe(model, zero_fill):
    """(params, signature) of the gradients to average.

    ``params``: [(name, param)] sorted by name, initialised parameters only.
    ``signature``: per param (name, shape, dtype, takes part, device), where a
    parameter takes part when it has a gradient or ``zero_fill`` is set.
    """
    params, sig = [], []
    zero_fill = bool(zero_fill)
    for n, p in sorted(model.namedparams()):
        a = p.array
        if a is not None:
            params.append((n, p))
            sig.append((n, a.shape, a.dtype.str, zero_fill or p.grad is not None, _xp_name(a)))
    return params, tuple(sig)


def signature_key(sig, wire_dtype):
    digest = hashlib.blake2b(
        repr((sig, None if wire_dtype is None else np.dtype(wire_dtype).str)).encode(), digest_size=8
    ).digest()
    return int.from_bytes(digest, "little") >> 2  # 62 bits: its negation fits an int64


def build_layout(params, sig, wire_dtype, wire=None):
    """A Layout for the participating params, packed as ``wire_dtype`` (None: each param's own dtype);
    ``wire``: the dtype between nodes, where a reducer keeps another in memory (ShmReducer)."""
    by_dtype = {}
    for i, ((name, p), s) in enumerate(zip(params, sig)):
        if not s[3]:
            continue
        dt = np.dtype(wire_dtype) if wire_dtype is not None else p.array.dtype
        by_dtype.setdefault(dt, []).append((i, name, tuple(p.array.shape), int(p.array.size)))
    groups, offset = [], 0
    for dt, items in by_dtype.items():
        entries, n = [], 0
        for i, name, shape, size in items:
            entries.append(Entry(i, name, shape, size, n))
            n += size
        groups.append(Group(dt, tuple(entries), n, offset))
        offset += -(-n * dt.itemsize // ALIGN) * ALIGN
    return Layout(signature_key(sig, wire_dtype), tuple(groups), offset, wire)


def _copy(dst, src):
    """dst[...] = src with casting, for NumPy or CuPy (same module on both sides)."""
    if isinstance(dst, np.ndarray):
        if dst.dtype == np.float16 and src.dtype == np.float32 and isinstance(src, np.ndarray):
            half.to_half(src, dst)  # table lookups: several times faster than NumPy's cast
        elif dst.dtype == np.float32 and src.dtype == np.float16 and isinstance(src, np.ndarray):
            half.from_half(src, dst)
        else:
            np.copyto(dst, src, casting="unsafe")
    else:
        dst[...] = src


def pack(views, params):
    """Copy (casting) every participating gradient into its view; None becomes zeros.

    ``views``: ``layout.entry_views(buf)``. A gradient that is still the view
    handed out by the previous ``unpack`` is already in place and skipped.
    """
    for e, dst, _, _ in views:
        grad = params[e.index][1].grad
        if grad is dst:
            continue
        if grad is None:
            dst.fill(0)
        else:
            _copy(dst, grad)


def unpack(views, params, keep=()):
    """Give every participating param its averaged gradient (the view itself when dtypes agree).

    ``keep``: indices of params whose gradient already holds the average
    (averaged in place by the strategy); they are left alone.
    """
    for e, src, wire, _ in views:
        if e.index in keep:
            continue
        p = params[e.index][1]
        grad = p.grad
        if grad is src:
            continue
        if p.array.dtype == wire:
            p.grad = src
        elif grad is not None and type(grad) is type(src) and grad.flags.writeable:
            _copy(grad, src)
        elif isinstance(src, np.ndarray):
            out = np.empty(src.shape, p.array.dtype)
            _copy(out, src)
            p.grad = out
        else:
            p.grad = src.astype(p.array.dtype)


def release(views, params):
    """Replace gradients that are our views by copies (before the buffer goes away)."""
    for e, src, _, _ in views:
        p = params[e.index][1]
        if p.grad is src:
            p.grad = src.copy()
