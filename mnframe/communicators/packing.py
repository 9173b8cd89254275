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

ALIGN = 64  # bytes; every group starts on a cache line


@dataclasses.dataclass(frozen=True)
class Entry:
    index: int      # position in the params list
    name: str
    shape: tuple
    size: int       # elements
    offset: int     # elements from the start of its group


@dataclasses.dataclass(frozen=True)
class Group:
    dtype: np.dtype  # wire dtype
    entries: tuple
    size: int        # elements
    byte_offset: int


@dataclasses.dataclass(frozen=True)
class Layout:
    key: int
    groups: tuple
    nbytes: int

    def group_arrays(self, buf):
        """Typed 1-d views of ``buf`` (uint8), one per group."""
        return [buf[g.byte_offset:g.byte_offset + g.size * g.dtype.itemsize].view(g.dtype) for g in self.groups]


def _xp_name(a):
    return "numpy" if a is None or isinstance(a, np.ndarray) else type(a).__module__.split(".")[0]


def describe(model, zero_fill):
    """(params, signature) of the gradients to average.

    ``params``: [(name, param)] sorted by name, initialised parameters only.
    ``signature``: per param (name, shape, dtype, takes part, device), where a
    parameter takes part when it has a gradient or ``zero_fill`` is set.
    """
    params = [(n, p) for n, p in sorted(model.namedparams()) if p.array is not None]
    sig = tuple((n, tuple(p.array.shape), p.array.dtype.str, p.grad is not None or bool(zero_fill),
                 _xp_name(p.array)) for n, p in params)
    return params, sig


def signature_key(sig, wire_dtype):
    digest = hashlib.blake2b(repr((sig, None if wire_dtype is None else np.dtype(wire_dtype).str)).encode(),
                             digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2  # 62 bits: its negation fits an int64


def build_layout(params, sig, wire_dtype):
    """A Layout for the participating params; ``wire_dtype=None`` keeps each param's dtype."""
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
    return Layout(signature_key(sig, wire_dtype), tuple(groups), offset)


def _same_memory(a, b):
    return (isinstance(a, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.strides == b.strides)


def pack(layout, params, buf):
    """Copy (casting) every participating gradient into ``buf``; None becomes zeros."""
    for g, arr in zip(layout.groups, layout.group_arrays(buf)):
        for e in g.entries:
            dst = arr[e.offset:e.offset + e.size].reshape(e.shape)
            grad = params[e.index][1].grad
            if grad is None:
                dst.fill(0)
            elif not _same_memory(grad, dst):
                np.copyto(dst, grad, casting="unsafe")


def unpack(layout, params, buf):
    """Give every participating param its averaged gradient (a view of ``buf`` when dtypes agree)."""
    for g, arr in zip(layout.groups, layout.group_arrays(buf)):
        for e in g.entries:
            src = arr[e.offset:e.offset + e.size].reshape(e.shape)
            p = params[e.index][1]
            grad = p.grad
            if p.array.dtype == g.dtype:
                if not _same_memory(grad, src):
                    p.grad = src
            elif grad is not None and isinstance(grad, np.ndarray) and grad.flags.writeable:
                np.copyto(grad, src, casting="unsafe")
            else:
                p.grad = src.astype(p.array.dtype)


def release(layout, params, buf):
    """Replace gradients that are views of ``buf`` by copies (before ``buf`` goes away)."""
    for g, arr in zip(layout.groups, layout.group_arrays(buf)):
        for e in g.entries:
            p = params[e.index][1]
            if _same_memory(p.grad, arr[e.offset:e.offset + e.size].reshape(e.shape)):
                p.grad = p.grad.copy()
