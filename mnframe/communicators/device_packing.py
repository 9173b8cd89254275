"""Packing CuPy gradients into a flat device buffer and back, batched or one by one.

``DevicePacker.pack`` writes ``scale * grad`` (cast to the wire dtype) for
every participating gradient into its place in the buffer; ``unpack`` hands
the averaged gradients back: as views of the buffer when the dtypes agree
(nothing copied), else cast into the parameters' own gradient arrays.

``batched=True`` (the communicators' ``batched_copy``) does each direction in
one kernel per (source dtype, destination dtype) pair: a table of the
gradients' device pointers (uploaded each step, since fresh gradients live at
new addresses) plus tables of element offsets built once per layout and kept.
Scaling by 1/size is folded into the packing kernel, so averaging costs no
separate pass. ``batched=False`` launches one small kernel per gradient.
CuPy is imported by the reducer that creates a packer, never here at import.
"""

import functools

import numpy as np

_CTYPE = {np.dtype(np.float16): "float16", np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
# Every kernel takes an unused float16 argument (``f16tag``): CuPy >= 14 defines its
# ``float16`` C type only in kernels with a float16 argument, and the casts below
# name it even when neither side of the copy is float16 (then it is harmless).
_SEARCH = """
    int lo = 0, hi = n - 1;  // the table entry holding element i: starts[lo] <= i < starts[lo + 1]
    while (lo < hi) { int mid = (lo + hi + 1) >> 1; if (starts[mid] <= i) lo = mid; else hi = mid - 1; }
    const long long k = i - starts[lo];
"""


def _ctype(dtype):
    ct = _CTYPE.get(np.dtype(dtype))
    if ct is None:
        raise TypeError(f"GPU gradient packing supports float16/32/64, got {dtype}")
    return ct


def _convert(src_t, dst_t):
    """C types (accumulate, then store through) for a cast from src_t to dst_t."""
    acc = "double" if "double" in (src_t, dst_t) else "float"
    through = "float" if dst_t == "float16" else acc  # CuPy's float16 is built from a float
    return acc, through


@functools.lru_cache(maxsize=None)
def _gather_kernel(src, dst):
    """params (pointer table) -> buffer: out[offsets[j] + k] = scale * src_j[k]; null pointer = zeros."""
    import cupy

    s, d = _ctype(src), _ctype(dst)
    acc, through = _convert(s, d)
    body = (
        _SEARCH
        + f"""
    const {s}* p = reinterpret_cast<const {s}*>(ptrs[lo]);
    const {acc} v = p ? ({acc})(p[k]) : ({acc})0;
    out[offsets[lo] + k] = ({d})(({through})(v * ({acc})scale));
    """
    )
    return cupy.ElementwiseKernel(
        "raw uint64 ptrs, raw int64 starts, raw int64 offsets, int32 n, float64 scale, raw float16 f16tag",
        f"raw {np.dtype(dst).name} out",
        body,
        f"mnframe_pack_{np.dtype(src).name}_{np.dtype(dst).name}",
    )


@functools.lru_cache(maxsize=None)
def _scatter_kernel(src, dst):
    """buffer -> params (pointer table): dst_j[k] = buf[offsets[j] + k]."""
    import cupy

    s, d = _ctype(src), _ctype(dst)
    acc, through = _convert(s, d)
    body = (
        _SEARCH
        + f"""
    {d}* p = reinterpret_cast<{d}*>(ptrs[lo]);
    p[k] = ({d})(({through})(({acc})(buf[offsets[lo] + k])));
    """
    )
    # ``buf`` is only read; it is declared as the output so every argument can be raw
    return cupy.ElementwiseKernel(
        "raw uint64 ptrs, raw int64 starts, raw int64 offsets, int32 n, raw float16 f16tag",
        f"raw {np.dtype(src).name} buf",
        body,
        f"mnframe_unpack_{np.dtype(src).name}_{np.dtype(dst).name}",
    )


class _Table:
    """Static part of one batched copy: which entries, their element starts and group offsets."""

    def __init__(self, cupy, entries):
        sizes = [e.size for e in entries]
        self.entries = entries
        self.n = len(entries)
        self.total = int(sum(sizes))
        self.starts = cupy.asarray(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
        self.offsets = cupy.asarray(np.array([e.offset for e in entries], dtype=np.int64))


class DevicePacker:
    """Copies between CuPy gradients and a layout's device buffer (see module doc)."""

    def __init__(self, cupy):
        self._cupy = cupy
        self._f16tag = cupy.zeros(1, dtype=np.float16)
        self._tables = {}  # (layout key, direction) -> {(group, src dtype, dst dtype): _Table}

    # ---- pack
    def pack(self, layout, groups, views, params, scale, batched):
        """``groups``: ``layout.group_arrays(buf)``; ``views``: ``layout.entry_views(buf)``."""
        if batched:
            self._pack_batched(layout, groups, views, params, scale)
            return
        cupy = self._cupy
        for e, dst, _wire, _ in views:
            grad = params[e.index][1].grad
            if grad is None:
                dst.fill(0)
            elif grad is dst:
                if scale != 1:
                    dst *= float(scale)
            elif scale != 1:  # computed in the wider of the two dtypes (float16 grads, float32 wire)
                cupy.multiply(grad, float(scale), out=dst, dtype=np.promote_types(grad.dtype, dst.dtype))
            else:
                dst[...] = grad

    def _pack_batched(self, layout, groups, views, params, scale):
        tables = self._tables.get((layout.key, "pack"))
        if tables is None:
            tables = self._tables[(layout.key, "pack")] = self._build(views, params, pack=True)
        keep = []  # contiguous copies of non-contiguous gradients, alive until the kernel is queued
        for (gi, src, dst), t in tables.items():
            ptrs = np.empty(t.n, dtype=np.uint64)
            for j, e in enumerate(t.entries):
                grad = params[e.index][1].grad
                if grad is None:
                    ptrs[j] = 0
                    continue
                if not grad.flags.c_contiguous:
                    grad = self._cupy.ascontiguousarray(grad)
                    keep.append(grad)
                ptrs[j] = grad.data.ptr
            _gather_kernel(src, dst)(
                self._cupy.asarray(ptrs),
                t.starts,
                t.offsets,
                np.int32(t.n),
                float(scale),
                self._f16tag,
                groups[gi],
                size=t.total,
            )
        del keep

    # ---- unpack
    def unpack(self, layout, groups, views, params, batched):
        casts = []
        for item in views:
            e, src, wire, _ = item
            p = params[e.index][1]
            if p.array.dtype == wire:
                if p.grad is not src:
                    p.grad = src
                continue
            grad = p.grad
            if (
                grad is None
                or type(grad) is not type(src)
                or grad.dtype != p.array.dtype
                or not grad.flags.c_contiguous
            ):
                p.grad = grad = self._cupy.empty(p.array.shape, dtype=p.array.dtype)
            casts.append(item)
            if not batched:
                grad[...] = src
        if batched and casts:
            self._unpack_batched(layout, groups, casts, params)

    def _unpack_batched(self, layout, groups, casts, params):
        tables = self._tables.get((layout.key, "unpack"))
        if tables is None:
            tables = self._tables[(layout.key, "unpack")] = self._build(casts, params, pack=False)
        for (gi, src, dst), t in tables.items():
            ptrs = np.fromiter((params[e.index][1].grad.data.ptr for e in t.entries), dtype=np.uint64, count=t.n)
            _scatter_kernel(src, dst)(
                self._cupy.asarray(ptrs), t.starts, t.offsets, np.int32(t.n), self._f16tag, groups[gi], size=t.total
            )

    # ---- tables
    def _build(self, items, params, pack):
        """{(group, source dtype, destination dtype): _Table}: params -> wire when packing, else back."""
        by_key = {}
        for e, _, wire, gi in items:
            own, wire = params[e.index][1].array.dtype, np.dtype(wire)
            by_key.setdefault((gi, own, wire) if pack else (gi, wire, own), []).append(e)
        return {key: _Table(self._cupy, entries) for key, entries in by_key.items()}

    def forget(self, layout):
        self._tables.pop((layout.key, "pack"), None)
        self._tables.pop((layout.key, "unpack"), None)
