"""float32 <-> float16 conversion: the CPU's F16C instructions where ``half_native`` can build them,
else table lookups in large NumPy blocks, 2-4x faster than NumPy's cast.

NumPy 1.x converts float16 one element at a time (about 9 ns per element for
float32 -> float16 and 4 ns back on this machine's cores): for a float16 wire
that costs about as much as the bytes it saves on a 1 Gbit/s link. Here:

* ``encode``: the top 20 bits of a float32 (sign, exponent, 11 mantissa bits)
  index a 2^20-entry table of float16 bits, built once by NumPy's own cast of
  each bucket's midpoint. Two whole-block operations (a shift and a ``take``).
  A gradient's values span few exponents, so the table entries in use stay in
  cache. Every float16 rounding boundary falls on a bucket's first value, so the
  result is NumPy's round-to-nearest-even except at exact ties, which round
  away from zero (one unit in the last place; about 1 in 16,000 random values).
  Overflow gives infinity, NaN stays NaN (but for the NaNs whose payload is
  only in the 12 lowest bits: they share the infinity's bucket).
* ``decode``: a 65536-entry float32 table (NumPy's cast of every float16),
  exact. ``decode(..., add=True)`` accumulates into float32 (the sums of a
  float16 wire are accumulated in float32).

``half_native`` (F16C, about 1 ns per element, NumPy's rounding exactly) takes over each
call whose arrays are contiguous; what follows describes the table it replaces.

``scale`` multiplies in float32 before rounding (averaging by 1/size in the
same pass over memory as the conversion).
"""

import functools
import threading
import warnings

import numpy as np

from mnframe.communicators import half_native

BLOCK = 1 << 16  # elements per block: the index/scratch blocks stay in L2 (measured 16K..256K)
# ``take(..., mode="wrap")``: every index is in range by construction (20 bits into 2^20 entries,
# 16 bits into 2^16); "wrap" measured 15-25% faster than "clip" here (NumPy 1.26, 6.4M elements).


@functools.lru_cache(maxsize=None)
def _encode_table():
    k = np.arange(1 << 20, dtype=np.uint32)
    mid = ((k << 12) | 0x800).view(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow to inf is what float16 does
        table = mid.astype(np.float16).view(np.uint16)
    table[0x7F800] = 0x7C00  # the infinities' buckets (their midpoints are NaNs)
    table[0xFF800] = 0xFC00
    return table


@functools.lru_cache(maxsize=None)
def _decode_table():
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


_local = threading.local()  # scratch blocks per thread (the overlap's thread converts too)


def _scratch_of(dtype, n):
    scratch = _local.__dict__.setdefault("scratch", {})
    buf = scratch.get(dtype)
    if buf is None or buf.size < n:
        buf = scratch[dtype] = np.empty(max(n, 1 << 12), dtype)
    return buf[:n]


def encode(src, dst, scale=1.0):
    """dst[:] = float16(scale * src): 1-d float32 ``src``, 1-d float16 or uint16 ``dst`` of the same size."""
    native = half_native.for_arrays(src, dst)
    if native is not None:
        return native.encode(src, dst, scale)
    table = _encode_table()
    out = dst.view(np.uint16)
    n = src.size
    idx = _scratch_of(np.uint32, min(n, BLOCK))
    tmp = _scratch_of(np.float32, min(n, BLOCK)) if scale != 1 else None
    for s in range(0, n, BLOCK):
        e = min(n, s + BLOCK)
        x = src[s:e]
        if tmp is not None:
            x = np.multiply(x, np.float32(scale), out=tmp[: e - s])
        i = idx[: e - s]
        np.right_shift(x.view(np.uint32), 12, out=i)
        np.take(table, i, out=out[s:e], mode="wrap")


@functools.lru_cache(maxsize=None)
def _round_table():
    return _decode_table()[_encode_table()]  # float32(float16(x)) per encode bucket


def encode_rounding(acc, dst):
    """``encode(acc, dst)`` and ``acc[:] = decode(dst)`` in one pass (one shift, two lookups):
    the float16 bits to send and the rounded value this rank keeps, as every receiver will decode it."""
    native = half_native.for_arrays(acc, dst)
    if native is not None:
        return native.encode_rounding(acc, dst)
    table, rounded = _encode_table(), _round_table()
    out = dst.view(np.uint16)
    n = acc.size
    idx = _scratch_of(np.uint32, min(n, BLOCK))
    for s in range(0, n, BLOCK):
        e = min(n, s + BLOCK)
        i = idx[: e - s]
        np.right_shift(acc[s:e].view(np.uint32), 12, out=i)
        np.take(table, i, out=out[s:e], mode="wrap")
        np.take(rounded, i, out=acc[s:e], mode="wrap")


def decode(src, dst, add=False):
    """dst[:] = float32(src), or ``dst += float32(src)`` with ``add``: 1-d float16 ``src``, float32 ``dst``."""
    native = half_native.for_arrays(src, dst)
    if native is not None:
        return native.decode(src, dst, add)
    table = _decode_table()
    idx = src.view(np.uint16)
    n = src.size
    tmp = _scratch_of(np.float32, min(n, BLOCK)) if add else None
    for s in range(0, n, BLOCK):
        e = min(n, s + BLOCK)
        if add:
            t = tmp[: e - s]
            np.take(table, idx[s:e], out=t, mode="wrap")
            np.add(dst[s:e], t, out=dst[s:e])
        else:
            np.take(table, idx[s:e], out=dst[s:e], mode="wrap")


def to_half(src, dst, scale=1.0):
    """``encode`` for any float32 array shape into ``dst`` (contiguous float16); NumPy's cast otherwise."""
    if src.dtype == np.float32 and src.flags.c_contiguous and dst.flags.c_contiguous:
        encode(src.reshape(-1), dst.reshape(-1), scale)
    else:
        np.copyto(dst, src * scale if scale != 1 else src, casting="unsafe")


def from_half(src, dst):
    """``decode`` into float32 ``dst`` (any shape, both contiguous); NumPy's cast otherwise."""
    if dst.dtype == np.float32 and src.flags.c_contiguous and dst.flags.c_contiguous:
        decode(src.reshape(-1), dst.reshape(-1))
    else:
        np.copyto(dst, src, casting="unsafe")
